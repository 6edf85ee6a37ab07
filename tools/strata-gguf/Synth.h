//===- Synth.h - random GGUF models for tests -------------------*- C++ -*-===//
//
// `strata-gguf synth` writes a small model with random weights and the
// tensor names, ggml shapes, metadata keys and tokenizer that llama.cpp's
// loader expects for qwen3, qwen3moe and qwen3next, the names and keys of
// the qwen4exp GGUF convention (docs/qwen4exp-model.md §2), and that
// models/<arch>.strata binds. qwen4exp also has a real-size preset, written
// as shapes only (tensor infos, no data) for planning; qwen3moe's 30b-a3b and
// qwen4exp's full12 are real-width models written with data (billions of
// values: every thread draws a share of each tensor, --quant fast codes them
// in one pass) for the llama.cpp peer benchmark (bench/llamacpp_*.sh).
//
// The pieces tests want to reach (the PRNG, the glob matcher, the --types
// rules, the tensor tables) are declared here.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"
#include "runtime/format/Xoshiro.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tools {

/// The usage text of the subcommand (part of `strata-gguf --help`).
extern const char *const kSynthUsage;

/// Runs `strata-gguf synth ARGS...` (\p args excludes "synth"). Prints
/// diagnostics to stderr; returns the process exit status (0, or 1 for any
/// error, in which case no output file is written).
int synthMain(const std::vector<std::string> &args);

//===----------------------------------------------------------------------===//
// Random numbers
//===----------------------------------------------------------------------===//

/// One step of SplitMix64 (Steele, Lea, Flood 2014): advances \p state by the
/// golden-ratio increment and returns the mixed value.
using format::splitMix64;

/// 64-bit FNV-1a hash of \p s (offset basis 0xcbf29ce484222325, prime
/// 0x100000001b3); names a tensor's random stream.
uint64_t fnv1a64(std::string_view s);

/// xoshiro256** (Blackman, Vigna 2018) seeded through SplitMix64, with
/// Box-Muller normals. Each tensor draws from its own stream, seeded by
/// `seed ^ fnv1a64(name)`, so a tensor's values depend only on the seed and
/// its name, not on the other tensors or on the chosen block types.
class SynthRng {
public:
  /// Fills the four state words with SplitMix64 outputs started at \p seed.
  explicit SynthRng(uint64_t seed);
  /// A generator in the given xoshiro256** state (for tests; not all zero).
  static SynthRng fromState(const std::array<uint64_t, 4> &state);
  /// Stream for tensor \p name under \p seed.
  static SynthRng forTensor(uint64_t seed, std::string_view name);
  /// That stream after \p draws calls of next() (a jump by the xoshiro256**
  /// state transition's matrix powers over GF(2), not \p draws steps): the
  /// values from element \p draws on, for threads that each draw a share of
  /// a tensor. Element i of every value kind takes exactly one draw (normals
  /// come in Box-Muller pairs of two draws), so \p draws must be even where
  /// the values are normals.
  static SynthRng forTensorAt(uint64_t seed, std::string_view name,
                              uint64_t draws);

  /// Next 64 random bits.
  uint64_t next();
  /// Uniform double in [0, 1) from the top 53 bits of next().
  double uniform();
  /// Standard normal from the Box-Muller transform of two uniforms
  /// (r = sqrt(-2 ln(1 - u1)), cos then sin of 2*pi*u2 on alternate calls).
  double normal();

private:
  format::Xoshiro256 rng_;
  bool haveSpare_ = false;
  double spare_ = 0;
};

//===----------------------------------------------------------------------===//
// --types
//===----------------------------------------------------------------------===//

/// Checks fnmatch-style glob syntax: `*`, `?`, `[set]` (ranges `a-z`, `!` or
/// `^` negates, a `]` first in the set is literal) and `\` escapes. Returns
/// an empty string if \p pattern is valid, else what is wrong with it.
std::string globSyntaxError(std::string_view pattern);

/// True if \p text matches the whole of \p pattern (a glob that passed
/// globSyntaxError; `*` and `?` match any character, '.' included).
bool globMatch(std::string_view pattern, std::string_view text);

/// One GLOB=TYPE override.
struct TypeRule {
  std::string glob;
  format::GgmlType type;
  std::string text; ///< the rule as written, for diagnostics
};

/// A parsed --types value: DEFAULT[,GLOB=TYPE...].
struct TypeSpec {
  format::GgmlType defaultType = format::GgmlType::F32;
  std::vector<TypeRule> rules; ///< in order; the first match wins
};

/// Parses \p spec. The first item is the default type unless it contains
/// '='; every other item is GLOB=TYPE (split at the last '='). Types are
/// spelled as in the IR ("q4_k") or as ggml names ("Q4_K") and must be ones
/// strata can quantise to. On error returns nullopt and sets \p error.
std::optional<TypeSpec> parseTypeSpec(std::string_view spec,
                                      std::string &error);

//===----------------------------------------------------------------------===//
// Architectures and presets
//===----------------------------------------------------------------------===//

/// How a tensor's values are drawn.
enum class SynthInit {
  FanIn, ///< N(0, 1/sqrt(ne0)): weights, conv taps
  /// 6 N(0, 1/sqrt(ne0)): token embeddings, rows of norm ~6. Each sublayer
  /// writes ~2.5 into the residual stream, so the stream changes by a
  /// fraction per sublayer (cosine ~0.9 between consecutive states, as in
  /// trained pre-norm models) instead of the first sublayer replacing a
  /// norm-1 embedding; a replaced stream makes the model chaotic, every
  /// rounding difference of the activations growing layer over layer.
  Embed,
  /// 4 N(0, 1/sqrt(ne0)): expert routers. Trained routers are decisive; a
  /// flat random router makes top-k selection flip on rounding noise.
  Router,
  /// 0.25 N(0, 1/sqrt(ne0)): projections that write the residual stream
  /// (attn_output, ffn_down*, ssm_out), so each layer nudges the stream as
  /// in trained models instead of replacing it.
  Residual,
  /// N(0, 1/sqrt(ne0)) times a log-normal scale per row: the LM head.
  Head,

  Norm, ///< 1 + 0.1 N(0, 1): RMSNorm weights
  /// -A with A ~ U(1, 16): qwen3next's / qwen4exp's ssm_a (= -exp(A_log)),
  /// the range the gated delta net's reference initialisation draws A from.
  SsmA,
  /// softplus^-1(dt), dt log-uniform in [1e-3, 1e-1] (the Mamba-2 time-step
  /// initialisation): ssm_dt.bias. With ssm_a, per-head decays
  /// exp(-A softplus(alpha + bias)) from ~0.2 to ~1, so some heads keep a
  /// long memory and a head's output is a sum over many tokens rather than
  /// one token's value scaled by a q.k that can be near zero (which the
  /// per-head output norm would blow up).
  DtBias,
};

/// One tensor of a synthetic model.
struct SynthTensor {
  std::string name;
  std::vector<uint64_t> dims; ///< ggml order (dims[0] = row length)
  SynthInit init = SynthInit::FanIn;
  /// The default type does not apply (llama-quantize keeps it f32, e.g.
  /// ssm_conv1d); an explicit GLOB=TYPE rule still does.
  bool defaultF32 = false;
};

/// The architecture names synth knows, in order.
std::vector<std::string> synthArchNames();
/// The preset names known for \p arch (empty if the arch is unknown).
std::vector<std::string> synthPresetNames(std::string_view arch);

/// The tensors of \p arch at \p preset, in file order, or an empty vector if
/// either is unknown.
std::vector<SynthTensor> synthTensors(std::string_view arch,
                                      std::string_view preset);

} // namespace strata::tools
