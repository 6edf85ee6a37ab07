"""test/Codegen/gemm-decode-int8-inputs.test: prints each kernel that reads int8
inputs in some form, or a GEMM: the int8 inputs of the form each run length
launches (1, 2, 9 rows), "-" for none."""
import json
import sys

plan = json.load(open(sys.argv[1]))
for i, k in enumerate(plan["kernels"]):
    code = k["code"]
    forms = [code] + code.get("alternates", [])
    name = k.get("fused") or k.get("recipe")
    if not any(f.get("int8_inputs") for f in forms) and "matmul" not in name:
        continue

    def at(t):
        chosen = code
        for a in code.get("alternates", []):
            if a["min_tokens"] <= t:
                chosen = a
        return chosen

    runs = [t for t in (1, 2, 9) if t == 1 or any(a["min_tokens"] <= t for a in code.get("alternates", []))]
    print(f"{i} {name}: " + " ".join(f"{t}:{at(t).get('int8_inputs') or '-'}".replace(" ", "") for t in runs))
