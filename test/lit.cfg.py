# lit configuration for strata-compile's IR, pass and tool tests.
import os
import lit.formats

config.name = "strata"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".strata", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = getattr(config, "strata_obj_root", config.test_source_root)
# Not lit tests: unit tests, fuzz corpora, golden data, shared inputs.
config.excludes = ["unit", "fuzz", "golden", "Inputs", "device", "CMakeLists.txt",
                   "lit.cfg.py", "lit.site.cfg.py.in"]

path = [config.strata_bin_dir, config.llvm_tools_dir, config.environment.get("PATH", "")]
config.environment["PATH"] = os.pathsep.join(path)
config.substitutions.append(("%models", os.path.join(config.strata_src_root, "models")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))

# ptxas (the CUDA toolkit) where strata-compile looks for it (PATH, then
# /usr/local/cuda/bin): sm_90 plans then hold cubins and ptxas's reports,
# which some tests read. Without it those tests are UNSUPPORTED.
import shutil
if (shutil.which("ptxas", path=config.environment["PATH"])
        or os.access("/usr/local/cuda/bin/ptxas", os.X_OK)):
    config.available_features.add("ptxas")
