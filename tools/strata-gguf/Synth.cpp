//===- Synth.cpp - random GGUF models for tests ---------------------------===//
//
// strata-gguf synth --arch ARCH --preset PRESET --seed N [--types SPEC] -o F
//
// What llama.cpp needs to load the result (its src/models/<arch>.cpp loaders
// and src/llama-vocab.cpp, see shared/reference/gguf-and-quants.md §1.6, §3):
//  - exactly the tensors the arch's loader creates (an extra tensor is a
//    "wrong number of tensors" error), with its ggml shapes;
//  - the hparams keys of §1.6, incl. the ssm.* keys and the expert keys;
//  - a tokenizer: tokenizer.ggml.model "gpt2" needs tokenizer.ggml.tokens and
//    tokenizer.ggml.merges, and every normal token must be spelled in GPT-2's
//    byte-to-unicode alphabet (detokenising maps each character back to a
//    byte). We write the 256 byte tokens, two-letter merges, and three
//    control tokens; token_embd's second dim is the token count.
// What the strata models need: the same names and keys (models/*.strata).
//
//===----------------------------------------------------------------------===//
#include "tools/strata-gguf/Synth.h"

#include "tools/strata-gguf/FastQuant.h"

#include "runtime/format/Gguf.h"
#include "runtime/format/Quants.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <numbers>
#include <system_error>
#include <thread>

using namespace strata::format;

namespace strata::tools {

const char *const kSynthUsage =
    "usage: strata-gguf synth --arch ARCH --preset PRESET --seed N\n"
    "                         [--types SPEC] [--compress-ratio N]\n"
    "                         [--vocab VOCAB.gguf] [--layers N]\n"
    "                         [--quant search|fast] [--shapes-only] -o FILE\n"
    "\n"
    "Writes a small model with random weights that llama.cpp loads and that\n"
    "models/ARCH.strata binds: llama.cpp's tensor names, ggml shapes, block\n"
    "types and metadata keys, and a synthetic byte-level BPE vocabulary.\n"
    "\n"
    "  --arch ARCH     qwen3 | qwen3moe | qwen3next | qwen4exp\n"
    "  --preset NAME   tiny (every matmul row length is a multiple of 256,\n"
    "                  so every block type fits); qwen4exp also has full\n"
    "                  (the real model's dimensions, --shapes-only only)\n"
    "                  and full12 (its width, 12 layers); qwen3moe also\n"
    "                  has 30b-a3b (Qwen3-30B-A3B's dimensions). Synthetic\n"
    "                  vocabularies past 4103 tokens are padded with\n"
    "                  unused [PADn] tokens\n"
    "  --seed N        decimal integer in [0, 2^64); the same seed gives the\n"
    "                  same file byte for byte\n"
    "  --types SPEC    DEFAULT[,GLOB=TYPE...]: DEFAULT is the type of the 2-D\n"
    "                  and 3-D weights (default f32); each GLOB=TYPE\n"
    "                  overrides it for the weights whose name matches GLOB\n"
    "                  (fnmatch syntax: * ? [a-z] [!x] \\c), the first\n"
    "                  matching rule winning. 1-D tensors (norms, biases,\n"
    "                  ssm_a, qwen3next's ffn_gate_inp_shexp) are always\n"
    "                  f32; ssm_conv1d stays f32 unless a rule names it, as\n"
    "                  do routers and qwen4exp's hc_*_{down,up,inject},\n"
    "                  ssm_alpha, ssm_beta, ple_conv1d, ffn_gate_inp_shexp\n"
    "                  ([D, 1]) and per_layer_token_embd. Types: f32 f16\n"
    "                  bf16\n"
    "                  q8_0 q4_0 q4_k q5_k q6_k iq4_nl iq4_xs iq3_s.\n"
    "                  Example: q8_0,*_exps*=iq3_s,token_embd*=q6_k\n"
    "  --compress-ratio N\n"
    "                  qwen4exp: attention.compress_ratios of the attention\n"
    "                  layers (default: the preset's, 4); 0 writes dense\n"
    "                  attention layers, as llama.cpp's converter does when\n"
    "                  the transformers beside it knows qwen4_exp\n"
    "  --vocab FILE    copy FILE's tokenizer (every tokenizer.* key, e.g. of\n"
    "                  llama.cpp's ggml-vocab-qwen2.gguf) instead of the\n"
    "                  synthetic vocabulary; the token count (token_embd's\n"
    "                  and output's second dim) is its vocabulary's\n"
    "  --layers N      the preset's first N layers (block_count N)\n"
    "  --quant MODE    search (default): each block's scales by a small\n"
    "                  search for the least squared error; fast: in one\n"
    "                  pass from each sub-block's range (Q4_K, Q6_K, IQ4_NL,\n"
    "                  IQ3_S; the same values, coarser codes, 10-100x\n"
    "                  faster: for real-size files). Rows are coded on\n"
    "                  every hardware thread either way\n"
    "  --shapes-only   write the tensor infos and metadata with\n"
    "                  strata.shapes_only = true and no tensor data:\n"
    "                  strata-compile plans from it, nothing runs it\n"
    "  -o FILE         output path (written atomically, only on success)\n"
    "\n"
    "Values: each tensor draws from its own xoshiro256** stream seeded with\n"
    "seed ^ fnv1a64(name) through SplitMix64, normals by Box-Muller, so a\n"
    "tensor's values do not depend on --types or on the other tensors.\n"
    "Matrices and conv taps are N(0, 1/sqrt(ne0)); projections into the\n"
    "residual stream 0.25x that; token embeddings 6x (the stream changes by\n"
    "a fraction per layer, as in trained models); routers 4x (decisive\n"
    "routing) and f32 unless a rule names them; LM-head rows times a\n"
    "log-normal scale; norm weights 1 + 0.1 N(0,1); ssm_a = -U(1,16);\n"
    "ssm_dt.bias = softplus^-1(dt), dt log-uniform in [1e-3, 1e-1].\n";

//===----------------------------------------------------------------------===//
// Random numbers
//===----------------------------------------------------------------------===//

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

SynthRng::SynthRng(uint64_t seed) : rng_(seed) {}

SynthRng SynthRng::fromState(const std::array<uint64_t, 4> &state) {
  SynthRng rng(0);
  rng.rng_ = format::Xoshiro256::fromState(state);
  return rng;
}

SynthRng SynthRng::forTensor(uint64_t seed, std::string_view name) {
  return SynthRng(seed ^ fnv1a64(name));
}

namespace {

using XoshiroState = std::array<uint64_t, 4>;

/// xoshiro256**'s state transition (format::Xoshiro256::next without its
/// output scrambler). It is linear over GF(2).
XoshiroState xoshiroStep(XoshiroState s) {
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return s;
}

/// A 256x256 matrix over GF(2): column j is the image of state bit j.
struct StateMatrix {
  std::array<XoshiroState, 256> column;

  XoshiroState apply(const XoshiroState &v) const {
    XoshiroState out{};
    for (int j = 0; j < 256; ++j)
      if ((v[j / 64] >> (j % 64)) & 1)
        for (int w = 0; w < 4; ++w)
          out[w] ^= column[j][w];
    return out;
  }
  StateMatrix times(const StateMatrix &b) const {
    StateMatrix m;
    for (int j = 0; j < 256; ++j)
      m.column[j] = apply(b.column[j]);
    return m;
  }
};

/// The transition to the powers 2^k, k < 64.
const std::vector<StateMatrix> &stepPowers() {
  static const std::vector<StateMatrix> powers = [] {
    std::vector<StateMatrix> p(64);
    for (int j = 0; j < 256; ++j) {
      XoshiroState unit{};
      unit[j / 64] = uint64_t(1) << (j % 64);
      p[0].column[j] = xoshiroStep(unit);
    }
    for (int k = 1; k < 64; ++k)
      p[k] = p[k - 1].times(p[k - 1]);
    return p;
  }();
  return powers;
}

} // namespace

SynthRng SynthRng::forTensorAt(uint64_t seed, std::string_view name,
                               uint64_t draws) {
  // Xoshiro256's seeding: four SplitMix64 outputs.
  uint64_t sm = seed ^ fnv1a64(name);
  XoshiroState s;
  for (uint64_t &w : s)
    w = splitMix64(sm);
  for (int k = 0; k < 64 && (draws >> k); ++k)
    if ((draws >> k) & 1)
      s = stepPowers()[k].apply(s);
  return fromState(s);
}

uint64_t SynthRng::next() { return rng_.next(); }

double SynthRng::uniform() { return rng_.uniform(); }

double SynthRng::normal() {
  if (haveSpare_) {
    haveSpare_ = false;
    return spare_;
  }
  // 1 - u1 lies in (0, 1], so the logarithm is finite.
  const double r = std::sqrt(-2.0 * std::log(1.0 - uniform()));
  const double theta = 2.0 * std::numbers::pi * uniform();
  spare_ = r * std::sin(theta);
  haveSpare_ = true;
  return r * std::cos(theta);
}

//===----------------------------------------------------------------------===//
// Globs and --types
//===----------------------------------------------------------------------===//

namespace {

/// Parses the set starting after '[' at \p i. Sets \p end to the index after
/// the closing ']' and reports whether \p c is in the set; returns false if
/// the set is malformed (with \p error set when non-null).
bool parseSet(std::string_view p, size_t i, char c, bool &in, size_t &end,
              std::string *error) {
  bool negate = false;
  if (i < p.size() && (p[i] == '!' || p[i] == '^')) {
    negate = true;
    ++i;
  }
  bool match = false;
  bool first = true;
  while (i < p.size() && (p[i] != ']' || first)) {
    first = false;
    char lo = p[i];
    if (lo == '\\') {
      if (++i == p.size())
        break;
      lo = p[i];
    }
    ++i;
    char hi = lo;
    if (i + 1 < p.size() && p[i] == '-' && p[i + 1] != ']') {
      hi = p[i + 1];
      i += 2;
      if (hi == '\\') {
        if (i == p.size())
          break;
        hi = p[i++];
      }
      if (hi < lo) {
        if (error)
          *error = fmt::format("range '{}-{}' is reversed", lo, hi);
        return false;
      }
    }
    if (c >= lo && c <= hi)
      match = true;
  }
  if (i >= p.size()) {
    if (error)
      *error = "'[' has no closing ']'";
    return false;
  }
  end = i + 1;
  in = match != negate;
  return true;
}

} // namespace

std::string globSyntaxError(std::string_view pattern) {
  if (pattern.empty())
    return "the glob is empty";
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '\\') {
      if (i + 1 == pattern.size())
        return "the glob ends in a lone '\\'";
      i += 2;
    } else if (pattern[i] == '[') {
      bool in;
      size_t end;
      std::string error;
      if (!parseSet(pattern, i + 1, 'a', in, end, &error))
        return error;
      i = end;
    } else {
      ++i;
    }
  }
  return {};
}

bool globMatch(std::string_view p, std::string_view s) {
  // Greedy matching with one backtrack point: the most recent '*' (enough
  // for globs, since a later '*' subsumes every earlier choice).
  size_t pi = 0, si = 0;
  size_t starP = std::string_view::npos, starS = 0;
  while (si < s.size()) {
    bool step = false;
    size_t nextP = pi + 1;
    if (pi < p.size()) {
      switch (p[pi]) {
      case '*':
        starP = pi++;
        starS = si;
        continue;
      case '?':
        step = true;
        break;
      case '[': {
        bool in = false;
        size_t end = 0;
        step = parseSet(p, pi + 1, s[si], in, end, nullptr) && in;
        nextP = end;
        break;
      }
      case '\\':
        step = pi + 1 < p.size() && p[pi + 1] == s[si];
        nextP = pi + 2;
        break;
      default:
        step = p[pi] == s[si];
      }
    }
    if (step) {
      pi = nextP;
      ++si;
    } else if (starP != std::string_view::npos) {
      pi = starP + 1;
      si = ++starS;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*')
    ++pi;
  return pi == p.size();
}

namespace {

/// The types quantizeRow() produces, in the order the help text lists them.
std::string quantisableTypeList() {
  std::string out;
  for (GgmlType t :
       {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
        GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
        GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::IQ3_S})
    out += fmt::format("{}{}", out.empty() ? "" : " ", ggmlTypeInfo(t).irName);
  return out;
}

/// " in rule 'ITEM'" unless the item is the type name alone.
std::string inItem(std::string_view name, std::string_view item) {
  return name == item ? "" : fmt::format(" in rule '{}'", item);
}

std::optional<GgmlType> parseType(std::string_view name, std::string_view item,
                                  std::string &error) {
  std::optional<GgmlTypeInfo> info = ggmlTypeFromIrName(name);
  if (!info)
    info = ggmlTypeFromName(name);
  if (!info) {
    error = fmt::format("--types: unknown type '{}'{} (known: {})", name,
                        inItem(name, item), quantisableTypeList());
    return std::nullopt;
  }
  if (!canQuantize(info->type)) {
    error =
        fmt::format("--types: strata cannot quantise to {}{} (it can "
                    "write: {})",
                    info->irName, inItem(name, item), quantisableTypeList());
    return std::nullopt;
  }
  return info->type;
}

} // namespace

std::optional<TypeSpec> parseTypeSpec(std::string_view spec,
                                      std::string &error) {
  TypeSpec out;
  if (spec.empty()) {
    error = "--types: the value is empty (expected DEFAULT[,GLOB=TYPE...])";
    return std::nullopt;
  }
  size_t index = 0;
  for (size_t start = 0; start <= spec.size(); ++index) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos)
      comma = spec.size();
    std::string_view item = spec.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) {
      error = fmt::format("--types: item {} of '{}' is empty", index + 1, spec);
      return std::nullopt;
    }
    size_t eq = item.rfind('=');
    if (eq == std::string_view::npos) {
      if (index != 0) {
        error = fmt::format("--types: '{}' is not GLOB=TYPE (only the first "
                            "item may be a bare default type)",
                            item);
        return std::nullopt;
      }
      std::optional<GgmlType> t = parseType(item, item, error);
      if (!t)
        return std::nullopt;
      out.defaultType = *t;
      continue;
    }
    std::string_view glob = item.substr(0, eq);
    std::string_view type = item.substr(eq + 1);
    if (type.empty()) {
      error = fmt::format("--types: rule '{}' has no type after '='", item);
      return std::nullopt;
    }
    std::string globError = globSyntaxError(glob);
    if (!globError.empty()) {
      error =
          fmt::format("--types: bad glob in rule '{}': {}", item, globError);
      return std::nullopt;
    }
    std::optional<GgmlType> t = parseType(type, item, error);
    if (!t)
      return std::nullopt;
    out.rules.push_back({std::string(glob), *t, std::string(item)});
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Architectures and presets
//===----------------------------------------------------------------------===//

namespace {

enum class Arch { Qwen3, Qwen3Moe, Qwen3Next, Qwen4Exp };

struct ArchInfo {
  const char *name = nullptr;
  Arch arch;
};

constexpr ArchInfo kArchs[] = {
    {"qwen3", Arch::Qwen3},
    {"qwen3moe", Arch::Qwen3Moe},
    {"qwen3next", Arch::Qwen3Next},
    {"qwen4exp", Arch::Qwen4Exp},
};

/// Dimensions of one preset; the GGUF key each field becomes is noted. A
/// field an arch does not use is 0.
struct Preset {
  const char *arch = nullptr;
  const char *name = nullptr;
  uint32_t layers = 0;     ///< block_count
  uint32_t embd = 0;       ///< embedding_length (D)
  uint32_t heads = 0;      ///< attention.head_count
  uint32_t headsKv = 0;    ///< attention.head_count_kv
  uint32_t headDim = 0;    ///< attention.key_length = value_length
  uint32_t ropeDims = 0;   ///< rope.dimension_count (partial RoPE if < headDim)
  uint32_t ffn = 0;        ///< feed_forward_length
  uint32_t vocab = 0;      ///< token count (token_embd's second dim)
  uint32_t context = 0;    ///< context_length
  float ropeBase = 0;      ///< rope.freq_base
  float rmsEps = 0;        ///< attention.layer_norm_rms_epsilon
  uint32_t experts = 0;    ///< expert_count
  uint32_t expertUsed = 0; ///< expert_used_count
  uint32_t expertFfn = 0;  ///< expert_feed_forward_length
  uint32_t sharedFfn = 0;  ///< expert_shared_feed_forward_length
  uint32_t fullAttnInterval = 0; ///< full_attention_interval
  uint32_t ssmConv = 0;          ///< ssm.conv_kernel
  uint32_t ssmState = 0;  ///< ssm.state_size (key head dim = value head dim)
  uint32_t ssmGroups = 0; ///< ssm.group_count (key heads)
  uint32_t ssmVHeads = 0; ///< ssm.time_step_rank (value heads)
  uint32_t ssmInner = 0;  ///< ssm.inner_size = ssmState * ssmVHeads
  // qwen4exp only (docs/qwen4exp-model.md §2, §3).
  uint32_t ropeSections[4] = {}; ///< rope.dimension_sections
  uint32_t compressRatio = 0;    ///< attention.compress_ratios[l] of QSA layers
  uint32_t indexerHeads = 0;     ///< attention.indexer.head_count
  uint32_t indexerDim = 0;       ///< attention.indexer.key_length
  uint32_t indexerTopK = 0;      ///< attention.indexer.top_k (tokens)
  uint32_t hcCount = 0;          ///< hyper_connection.count (streams)
  uint32_t hcLowRank = 0;        ///< hyper_connection.low_rank
  uint32_t pleLayer = 0;         ///< ple.layers = [pleLayer]
  uint32_t pleNgram = 0;         ///< ple.ngram_size
  uint32_t pleHeadsPerNgram = 0; ///< ple.heads_per_ngram
  uint32_t pleConv = 0;          ///< ple.conv_kernel
  uint32_t pleDim = 0;           ///< embedding_length_per_layer_input
  /// The HF config's seed and ngram_vocab_size_base, from which the hash
  /// constants are derived; llama.cpp's converter stores only the derived
  /// constants, and so does synth.
  uint32_t pleSeed = 0;
  uint32_t pleVocabBase = 0;
  /// Real-size: no synthetic vocabulary (tokenizer.ggml.model "no_vocab",
  /// this EOS id) and only written with --shapes-only.
  bool realSize = false;
  uint32_t eosToken = 0;
};

// The real Qwen4-Exp text model's dimensions (docs/qwen4exp-model.md §0,
// §2; test/Inputs/gen_kv.py qwen4exp_real): 48 layers, QSA every 4th,
// PLE on blk.1, 512 experts, 1224 tensors. The EOS id is a stand-in.
constexpr Preset kQwen4ExpFull = {.arch = "qwen4exp",
                                  .name = "full",
                                  .layers = 48,
                                  .embd = 2560,
                                  .heads = 24,
                                  .headsKv = 2,
                                  .headDim = 256,
                                  .ropeDims = 64,
                                  .vocab = 248320,
                                  .context = 262144,
                                  .ropeBase = 10000000.0f,
                                  .rmsEps = 1e-6f,
                                  .experts = 512,
                                  .expertUsed = 10,
                                  .expertFfn = 640,
                                  .sharedFfn = 640,
                                  .fullAttnInterval = 4,
                                  .ssmConv = 4,
                                  .ssmState = 128,
                                  .ssmGroups = 16,
                                  .ssmVHeads = 48,
                                  .ssmInner = 6144,
                                  .ropeSections = {11, 11, 10, 0},
                                  .compressRatio = 4,
                                  .indexerHeads = 4,
                                  .indexerDim = 128,
                                  .indexerTopK = 2048,
                                  .hcCount = 4,
                                  .hcLowRank = 320,
                                  .pleLayer = 1,
                                  .pleNgram = 3,
                                  .pleHeadsPerNgram = 8,
                                  .pleConv = 4,
                                  .pleDim = 160,
                                  .pleSeed = 1234,
                                  .pleVocabBase = 20000000,
                                  .realSize = true,
                                  .eosToken = 248046};

// The full model's width with 12 layers (QSA or dense attention on
// blk.3, 7, 11), written with data (16 GB in the UD-IQ4_XS-like mix): the
// peer benchmark against llama.cpp (bench/llamacpp_prepare.sh). Its
// vocabulary is the synthetic one padded to 248320 tokens, and its PLE
// table's heads hash into primes from 100,000, not 20,000,000: 1.6M rows
// (272 MB in Q8_0) instead of 320M (54 GB). A gather reads the same rows
// per token from either.
constexpr Preset qwen4ExpFull12() {
  Preset p = kQwen4ExpFull;
  p.name = "full12";
  p.layers = 12;
  p.pleVocabBase = 100000;
  p.realSize = false;
  p.eosToken = 0;
  return p;
}

// The presets. Widths that are a matmul's row length (D, H*HD, F, FE, FS,
// value heads * head dim) are multiples of 256 so every block type fits.
// qwen3moe's expert width differs from D so a swapped gate/down stack shows.
// The MoE presets route each token to 4 of 16 experts: with several experts
// per token (the real models use 8 of 128, 10 of 512) one expert more or less
// at the top-k boundary changes a token's MoE output by a fraction, as in the
// real models, instead of by half as with 2 of 8.
constexpr Preset kPresets[] = {
    {.arch = "qwen3",
     .name = "tiny",
     .layers = 2,
     .embd = 256,
     .heads = 4,
     .headsKv = 2,
     .headDim = 64,
     .ropeDims = 64,
     .ffn = 512,
     .vocab = 1000,
     .context = 4096,
     .ropeBase = 1000000.0f,
     .rmsEps = 1e-6f},
    {.arch = "qwen3moe",
     .name = "tiny",
     .layers = 2,
     .embd = 256,
     .heads = 4,
     .headsKv = 2,
     .headDim = 64,
     .ropeDims = 64,
     .ffn = 1024,
     .vocab = 1000,
     .context = 4096,
     .ropeBase = 1000000.0f,
     .rmsEps = 1e-6f,
     .experts = 16,
     .expertUsed = 4,
     .expertFfn = 512},
    // Qwen3-30B-A3B's dimensions (its config.json): 48 layers, hidden 2048,
    // 32 query and 4 KV heads of 128, 128 experts of width 768 (8 a token),
    // RoPE base 1e6; the synthetic vocabulary padded to its 151936 tokens.
    // Written with data: the peer benchmark against llama.cpp.
    {.arch = "qwen3moe",
     .name = "30b-a3b",
     .layers = 48,
     .embd = 2048,
     .heads = 32,
     .headsKv = 4,
     .headDim = 128,
     .ropeDims = 128,
     .ffn = 6144,
     .vocab = 151936,
     .context = 40960,
     .ropeBase = 1000000.0f,
     .rmsEps = 1e-6f,
     .experts = 128,
     .expertUsed = 8,
     .expertFfn = 768},
    // Four layers with full_attention_interval 4: blk.0..2 are gated delta
    // nets, blk.3 is gated full attention. Partial RoPE (16 of 64 dims).
    {.arch = "qwen3next",
     .name = "tiny",
     .layers = 4,
     .embd = 256,
     .heads = 4,
     .headsKv = 2,
     .headDim = 64,
     .ropeDims = 16,
     .ffn = 256,
     .vocab = 1000,
     .context = 4096,
     .ropeBase = 10000000.0f,
     .rmsEps = 1e-6f,
     .experts = 16,
     .expertUsed = 4,
     .expertFfn = 256,
     .sharedFfn = 768,
     .fullAttnInterval = 4,
     .ssmConv = 4,
     .ssmState = 64,
     .ssmGroups = 2,
     .ssmVHeads = 4,
     .ssmInner = 256},
    // Four layers with full_attention_interval 4, as the real model's
    // pattern: blk.0 and blk.2 are gated delta nets, blk.1 a gated delta net
    // with PLE, blk.3 QSA (gated attention with a block indexer). Four
    // hyper-connection streams with rank-32 read gates. Every row length a
    // default type reaches is a multiple of 256; the hyper-connection, alpha
    // / beta, conv and router weights keep f32 unless a rule names them (the
    // published files keep them 16- or 32-bit).
    {.arch = "qwen4exp",
     .name = "tiny",
     .layers = 4,
     .embd = 256,
     .heads = 4,
     .headsKv = 2,
     .headDim = 64,
     .ropeDims = 16,
     .vocab = 1000,
     .context = 4096,
     .ropeBase = 10000000.0f,
     .rmsEps = 1e-6f,
     .experts = 8,
     .expertUsed = 2,
     .expertFfn = 256,
     .sharedFfn = 256,
     .fullAttnInterval = 4,
     .ssmConv = 4,
     .ssmState = 64,
     .ssmGroups = 2,
     .ssmVHeads = 4,
     .ssmInner = 256,
     .ropeSections = {3, 3, 2, 0},
     .compressRatio = 4,
     .indexerHeads = 4,
     .indexerDim = 64,
     .indexerTopK = 16,
     .hcCount = 4,
     .hcLowRank = 32,
     .pleLayer = 1,
     .pleNgram = 3,
     .pleHeadsPerNgram = 2,
     .pleConv = 4,
     // llama.cpp takes the PLE row to be D wide (ple_value is [D, D]):
     // NH * pleDim = 4 * 64 = D.
     .pleDim = 64,
     .pleSeed = 1234,
     .pleVocabBase = 500},
    kQwen4ExpFull,
    qwen4ExpFull12(),
};

/// What llama.cpp's loaders and the vocabulary builder rely on: qwen3next's
/// value head dim is both ssm.state_size and inner_size / time_step_rank,
/// value heads are a multiple of key heads, and the vocabulary holds the 256
/// byte tokens and the control tokens (then up to 62 * 62 two-letter tokens,
/// then padding).
constexpr bool presetsAreConsistent() {
  for (const Preset &p : kPresets) {
    if (!p.realSize && p.vocab < 256 + 3)
      return false;
    if (p.ssmVHeads && (p.ssmInner != p.ssmState * p.ssmVHeads ||
                        p.ssmVHeads % p.ssmGroups != 0))
      return false;
    if (p.experts && p.expertUsed > p.experts)
      return false;
  }
  return true;
}
static_assert(presetsAreConsistent(), "inconsistent synth preset");

const ArchInfo *findArch(std::string_view name) {
  for (const ArchInfo &a : kArchs)
    if (name == a.name)
      return &a;
  return nullptr;
}

const Preset *findPreset(std::string_view arch, std::string_view name) {
  for (const Preset &p : kPresets)
    if (arch == p.arch && name == p.name)
      return &p;
  return nullptr;
}

/// qwen3next layer \p l is full attention (else a gated delta net), as in
/// llama.cpp's loader: recurrent iff (l + 1) % full_attention_interval != 0.
bool isFullAttention(const Preset &p, uint32_t l) {
  return (l + 1) % p.fullAttnInterval == 0;
}

/// qwen4exp's PLE hash constants for PLE layer 0 (docs/qwen4exp-model.md
/// §3.4): per n-gram order a multiplier, per hashed head a prime table size
/// and its offset, and the table's row count.
struct PleConstants {
  std::vector<uint64_t> mults, sizes, offsets;
  uint64_t rows = 0;
};

bool isPrime(uint64_t x) {
  if (x < 2 || x % 2 == 0)
    return x == 2;
  for (uint64_t f = 3; f * f <= x; f += 2)
    if (x % f == 0)
      return false;
  return true;
}

PleConstants pleConstants(const Preset &p) {
  PleConstants c;
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
  const uint64_t half =
      std::max<uint64_t>(1, (uint64_t(INT64_MAX) / p.vocab) / 2);
  for (uint64_t s = 0; s < p.pleNgram; ++s) {
    // splitMix64 adds the increment before mixing, as sm(v) in the spec.
    uint64_t v = p.pleSeed + kGolden * (s + 1);
    c.mults.push_back(2 * (splitMix64(v) % half) + 1);
  }
  const uint64_t heads = uint64_t(p.pleNgram - 1) * p.pleHeadsPerNgram;
  uint64_t total = 0;
  for (uint64_t x = p.pleVocabBase; c.sizes.size() < heads; ++x)
    if (isPrime(x)) {
      c.offsets.push_back(total);
      c.sizes.push_back(x);
      total += x;
    }
  c.rows = (total + 127) / 128 * 128;
  return c;
}

/// qwen4exp tensors in the order of the HF oracle's files: the output
/// hyper-connection read, then per layer the two gated-residual sites, the
/// PLE weights, the mixer (GDN or QSA) and the MoE.
void qwen4expTensors(const Preset &p, std::vector<SynthTensor> &t) {
  auto add = [&](std::string name, std::vector<uint64_t> dims,
                 SynthInit init = SynthInit::FanIn, bool defaultF32 = false) {
    t.push_back({std::move(name), std::move(dims), init, defaultF32});
  };
  const uint64_t D = p.embd, H = p.heads, HKV = p.headsKv, HD = p.headDim;
  const uint64_t E = p.experts, FE = p.expertFfn, FS = p.sharedFfn;
  const uint64_t HC = p.hcCount, LR = p.hcLowRank;
  const uint64_t NH = uint64_t(p.pleNgram - 1) * p.pleHeadsPerNgram;
  const uint64_t HP = p.pleDim;
  // A read site: the 1+w per-stream norm, the low-rank gate pair and (for
  // sublayer sites) the injection logits; kept f32 by the default type.
  auto site = [&](const std::string &prefix, bool inject) {
    add(prefix + "_norm.weight", {HC * D}, SynthInit::Norm);
    add(prefix + "_down.weight", {HC * D, LR}, SynthInit::FanIn, true);
    add(prefix + "_up.weight", {LR, HC * D}, SynthInit::FanIn, true);
    if (inject)
      add(prefix + "_inject.weight", {HC * D, HC}, SynthInit::FanIn, true);
  };

  add("token_embd.weight", {D, p.vocab}, SynthInit::Embed);
  add("output.weight", {D, p.vocab}, SynthInit::Head);
  site("output_hc", false);
  // Rows of HP = D / NH values (64 in the tiny preset) fit no 256-element
  // block, so the table keeps f32 unless a rule names it (published files
  // store it Q8_0).
  add("per_layer_token_embd.weight", {HP, pleConstants(p).rows},
      SynthInit::FanIn, /*defaultF32=*/true);
  for (uint32_t l = 0; l < p.layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    site(b + "hc_attn", true);
    site(b + "hc_ffn", true);
    if (l == p.pleLayer) {
      add(b + "ple_key.weight", {NH * HP, HC * D});
      add(b + "ple_value.weight", {NH * HP, D}, SynthInit::Residual);
      add(b + "ple_norm_key.weight", {HC * D}, SynthInit::Norm);
      add(b + "ple_norm_query.weight", {HC * D}, SynthInit::Norm);
      add(b + "ple_norm_conv.weight", {HC * D}, SynthInit::Norm);
      add(b + "ple_conv1d.weight", {p.pleConv, HC * D}, SynthInit::FanIn,
          /*defaultF32=*/true);
    }
    if (isFullAttention(p, l)) {
      // Per head: HD query values, then HD gate values.
      add(b + "attn_q.weight", {D, 2 * H * HD});
      add(b + "attn_k.weight", {D, HKV * HD});
      add(b + "attn_v.weight", {D, HKV * HD});
      add(b + "attn_output.weight", {H * HD, D}, SynthInit::Residual);
      add(b + "attn_q_norm.weight", {HD}, SynthInit::Norm);
      add(b + "attn_k_norm.weight", {HD}, SynthInit::Norm);
      add(b + "indexer.q_proj.weight",
          {D, uint64_t(p.indexerHeads) * p.indexerDim});
      add(b + "indexer.k_proj.weight", {D, p.indexerDim});
      add(b + "indexer.q_norm.weight", {p.indexerDim}, SynthInit::Norm);
      add(b + "indexer.k_norm.weight", {p.indexerDim}, SynthInit::Norm);
    } else {
      const uint64_t keyDim = uint64_t(p.ssmState) * p.ssmGroups;
      const uint64_t valueDim = p.ssmInner;
      const uint64_t convDim = 2 * keyDim + valueDim;
      add(b + "attn_qkv.weight", {D, convDim});
      add(b + "attn_gate.weight", {D, valueDim});
      add(b + "ssm_alpha.weight", {D, p.ssmVHeads}, SynthInit::FanIn, true);
      add(b + "ssm_beta.weight", {D, p.ssmVHeads}, SynthInit::FanIn, true);
      add(b + "ssm_a", {p.ssmVHeads}, SynthInit::SsmA);
      add(b + "ssm_dt.bias", {p.ssmVHeads}, SynthInit::DtBias);
      add(b + "ssm_conv1d.weight", {p.ssmConv, convDim}, SynthInit::FanIn,
          /*defaultF32=*/true);
      // A plain weight (no +1), near 1 as a trained one.
      add(b + "ssm_norm.weight", {valueDim / p.ssmVHeads}, SynthInit::Norm);
      add(b + "ssm_out.weight", {valueDim, D}, SynthInit::Residual);
    }
    add(b + "ffn_gate_inp.weight", {D, E}, SynthInit::Router, true);
    add(b + "ffn_gate_exps.weight", {D, FE, E});
    add(b + "ffn_up_exps.weight", {D, FE, E});
    add(b + "ffn_down_exps.weight", {FE, D, E}, SynthInit::Residual);
    add(b + "ffn_gate_shexp.weight", {D, FS});
    add(b + "ffn_up_shexp.weight", {D, FS});
    add(b + "ffn_down_shexp.weight", {FS, D}, SynthInit::Residual);
    // As llama.cpp's converter writes it: ggml [D, 1] (HF's [1, D]).
    add(b + "ffn_gate_inp_shexp.weight", {D, 1}, SynthInit::FanIn, true);
  }
}

std::vector<SynthTensor> buildTensors(Arch arch, const Preset &p) {
  if (arch == Arch::Qwen4Exp) {
    std::vector<SynthTensor> t;
    qwen4expTensors(p, t);
    return t;
  }
  std::vector<SynthTensor> t;
  auto add = [&](std::string name, std::vector<uint64_t> dims,
                 SynthInit init = SynthInit::FanIn, bool defaultF32 = false) {
    t.push_back({std::move(name), std::move(dims), init, defaultF32});
  };
  const uint64_t D = p.embd, H = p.heads, HKV = p.headsKv, HD = p.headDim;
  const uint64_t E = p.experts, FE = p.expertFfn;

  add("token_embd.weight", {D, p.vocab}, SynthInit::Embed);
  add("output_norm.weight", {D}, SynthInit::Norm);
  add("output.weight", {D, p.vocab}, SynthInit::Head);

  for (uint32_t l = 0; l < p.layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    auto attention = [&](uint64_t qWidth) {
      add(b + "attn_q.weight", {D, qWidth});
      add(b + "attn_q_norm.weight", {HD}, SynthInit::Norm);
      add(b + "attn_k.weight", {D, HKV * HD});
      add(b + "attn_k_norm.weight", {HD}, SynthInit::Norm);
      add(b + "attn_v.weight", {D, HKV * HD});
      add(b + "attn_output.weight", {H * HD, D}, SynthInit::Residual);
    };
    auto routedExperts = [&] {
      // llama-quantize keeps routers f32, and so does the default type here.
      add(b + "ffn_gate_inp.weight", {D, E}, SynthInit::Router, true);
      add(b + "ffn_gate_exps.weight", {D, FE, E});
      add(b + "ffn_up_exps.weight", {D, FE, E});
      add(b + "ffn_down_exps.weight", {FE, D, E}, SynthInit::Residual);
    };
    switch (arch) {
    case Arch::Qwen3:
      add(b + "attn_norm.weight", {D}, SynthInit::Norm);
      attention(H * HD);
      add(b + "ffn_norm.weight", {D}, SynthInit::Norm);
      add(b + "ffn_gate.weight", {D, p.ffn});
      add(b + "ffn_up.weight", {D, p.ffn});
      add(b + "ffn_down.weight", {p.ffn, D}, SynthInit::Residual);
      break;
    case Arch::Qwen3Moe:
      add(b + "attn_norm.weight", {D}, SynthInit::Norm);
      attention(H * HD);
      add(b + "ffn_norm.weight", {D}, SynthInit::Norm);
      routedExperts();
      break;
    case Arch::Qwen4Exp:
      break; // qwen4expTensors
    case Arch::Qwen3Next: {
      add(b + "attn_norm.weight", {D}, SynthInit::Norm);
      add(b + "post_attention_norm.weight", {D}, SynthInit::Norm);
      if (isFullAttention(p, l)) {
        // Per head: HD query values, then HD gate values.
        attention(2 * H * HD);
      } else {
        const uint64_t keyDim = uint64_t(p.ssmState) * p.ssmGroups;
        const uint64_t valueDim = uint64_t(p.ssmState) * p.ssmVHeads;
        const uint64_t convDim = 2 * keyDim + valueDim;
        add(b + "attn_qkv.weight", {D, convDim});
        add(b + "attn_gate.weight", {D, valueDim});
        add(b + "ssm_conv1d.weight", {p.ssmConv, convDim}, SynthInit::FanIn,
            /*defaultF32=*/true);
        add(b + "ssm_dt.bias", {p.ssmVHeads}, SynthInit::DtBias);
        add(b + "ssm_a", {p.ssmVHeads}, SynthInit::SsmA);
        add(b + "ssm_ba.weight", {D, 2 * uint64_t(p.ssmVHeads)});
        add(b + "ssm_norm.weight", {p.ssmState}, SynthInit::Norm);
        add(b + "ssm_out.weight", {valueDim, D}, SynthInit::Residual);
      }
      routedExperts();
      add(b + "ffn_gate_inp_shexp.weight", {D});
      add(b + "ffn_gate_shexp.weight", {D, p.sharedFfn});
      add(b + "ffn_up_shexp.weight", {D, p.sharedFfn});
      add(b + "ffn_down_shexp.weight", {p.sharedFfn, D}, SynthInit::Residual);
      break;
    }
    }
  }
  return t;
}

//===----------------------------------------------------------------------===//
// Tokenizer
//===----------------------------------------------------------------------===//

/// The three control tokens, last in the vocabulary; the first is BOS, EOS
/// and padding (Qwen's convention for base models).
constexpr const char *kControlTokens[] = {"<|endoftext|>", "<|im_start|>",
                                          "<|im_end|>"};
/// Letters of the two-letter merged tokens.
constexpr std::string_view kMergeAlphabet =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

std::string utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return out;
}

/// GPT-2's byte-level alphabet: the printable Latin-1 bytes (0x21-0x7e,
/// 0xa1-0xac, 0xae-0xff) stand for themselves; the other 68 bytes take the
/// code points U+0100, U+0101, ... in increasing byte order.
std::string byteToken(uint8_t byte) {
  uint32_t next = 0x100;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
                     (b >= 0xae && b <= 0xff);
    uint32_t cp = printable ? b : next++;
    if (b == byte)
      return utf8(cp);
  }
  return {};
}

struct Vocab {
  std::vector<MetaValue> tokens, types, merges;
  uint32_t endOfText = 0;
};

/// \p size tokens: 256 byte tokens, up to 62 * 62 two-letter tokens (each
/// with the merge that builds it), "[PADn]" tokens (n their id, unused, as
/// llama.cpp's converter pads a vocabulary to the embedding's rows), then
/// the control tokens.
Vocab buildVocab(uint32_t size) {
  constexpr int32_t kNormal = 1, kControl = 3, kUnused = 5; // gguf-py
  constexpr uint32_t kControlCount = std::size(kControlTokens);
  Vocab v;
  for (uint32_t b = 0; b < 256; ++b) {
    v.tokens.push_back(MetaValue::makeString(byteToken(uint8_t(b))));
    v.types.push_back(MetaValue::makeInt(kNormal));
  }
  const uint32_t pairs =
      std::min<uint32_t>(size - 256 - kControlCount,
                         kMergeAlphabet.size() * kMergeAlphabet.size());
  for (uint32_t i = 0; i < pairs; ++i) {
    char a = kMergeAlphabet[i / kMergeAlphabet.size()];
    char b = kMergeAlphabet[i % kMergeAlphabet.size()];
    v.tokens.push_back(MetaValue::makeString(std::string{a, b}));
    v.types.push_back(MetaValue::makeInt(kNormal));
    v.merges.push_back(MetaValue::makeString(std::string{a, ' ', b}));
  }
  while (v.tokens.size() < size - kControlCount) {
    v.tokens.push_back(
        MetaValue::makeString(fmt::format("[PAD{}]", v.tokens.size())));
    v.types.push_back(MetaValue::makeInt(kUnused));
  }
  v.endOfText = static_cast<uint32_t>(v.tokens.size());
  for (const char *c : kControlTokens) {
    v.tokens.push_back(MetaValue::makeString(c));
    v.types.push_back(MetaValue::makeInt(kControl));
  }
  return v;
}

//===----------------------------------------------------------------------===//
// Metadata
//===----------------------------------------------------------------------===//

/// llama.cpp's llama_ftype for a file whose weights are mostly \p t (what
/// its loader guesses when general.file_type is absent).
uint32_t fileTypeOf(GgmlType t) {
  struct Entry {
    GgmlType type;
    uint32_t ftype;
  };
  static constexpr Entry kFileTypes[] = {
      {GgmlType::F32, 0},     {GgmlType::F16, 1},     {GgmlType::Q4_0, 2},
      {GgmlType::Q8_0, 7},    {GgmlType::Q4_K, 15},   {GgmlType::Q5_K, 17},
      {GgmlType::Q6_K, 18},   {GgmlType::IQ4_NL, 25}, {GgmlType::IQ3_S, 26},
      {GgmlType::IQ4_XS, 30}, {GgmlType::BF16, 32},
  };
  for (const Entry &e : kFileTypes)
    if (e.type == t)
      return e.ftype;
  return 0;
}

/// The qwen4exp keys past the common ones, as llama.cpp's converter writes
/// them (docs/qwen4exp-model.md §2), through \p put(key, value); attention
/// layers get \p compressRatio (0: dense attention).
template <typename Put>
void qwen4expMetadata(const Preset &p, uint32_t compressRatio, uint32_t eos,
                      Put &&put) {
  auto u32 = [](uint64_t v) { return MetaValue::makeUInt(v); };
  auto array = [](GgufValueType t, const auto &values) {
    std::vector<MetaValue> elems;
    for (auto v : values)
      elems.push_back(t == GgufValueType::Int32 ? MetaValue::makeInt(v, t)
                                                : MetaValue::makeUInt(v, t));
    return MetaValue::makeArray(t, std::move(elems));
  };
  const std::string a = p.arch;
  std::vector<uint64_t> ratios;
  std::vector<MetaValue> recurrent;
  for (uint32_t l = 0; l < p.layers; ++l) {
    ratios.push_back(isFullAttention(p, l) ? compressRatio : 0);
    recurrent.push_back(MetaValue::makeBool(!isFullAttention(p, l)));
  }
  const PleConstants ple = pleConstants(p);
  put(a + ".vocab_size", u32(p.vocab));
  put(a + ".rope.dimension_sections",
      array(GgufValueType::Int32, p.ropeSections));
  put(a + ".attention.recurrent_layers",
      MetaValue::makeArray(GgufValueType::Bool, std::move(recurrent)));
  put(a + ".full_attention_interval", u32(p.fullAttnInterval));
  put(a + ".attention.compress_ratios", array(GgufValueType::UInt32, ratios));
  put(a + ".attention.indexer.head_count", u32(p.indexerHeads));
  put(a + ".attention.indexer.key_length", u32(p.indexerDim));
  put(a + ".attention.indexer.top_k", u32(p.indexerTopK));
  put(a + ".expert_count", u32(p.experts));
  put(a + ".expert_used_count", u32(p.expertUsed));
  put(a + ".expert_feed_forward_length", u32(p.expertFfn));
  put(a + ".expert_shared_feed_forward_length", u32(p.sharedFfn));
  put(a + ".ssm.conv_kernel", u32(p.ssmConv));
  put(a + ".ssm.state_size", u32(p.ssmState));
  put(a + ".ssm.group_count", u32(p.ssmGroups));
  put(a + ".ssm.time_step_rank", u32(p.ssmVHeads));
  put(a + ".ssm.inner_size", u32(p.ssmInner));
  put(a + ".hyper_connection.count", u32(p.hcCount));
  put(a + ".hyper_connection.low_rank", u32(p.hcLowRank));
  put(a + ".ple.layers",
      array(GgufValueType::UInt32, std::vector<uint32_t>{p.pleLayer}));
  put(a + ".ple.ngram_size", u32(p.pleNgram));
  put(a + ".ple.heads_per_ngram", u32(p.pleHeadsPerNgram));
  put(a + ".ple.conv_kernel", u32(p.pleConv));
  put(a + ".ple.eos_token_id", u32(eos));
  put(a + ".ple.layer_multipliers", array(GgufValueType::UInt64, ple.mults));
  put(a + ".ple.head_vocab_sizes", array(GgufValueType::UInt64, ple.sizes));
  put(a + ".ple.head_offsets", array(GgufValueType::UInt64, ple.offsets));
  put(a + ".embedding_length_per_layer_input", u32(p.pleDim));
}

/// A vocabulary copied from another GGUF (synth --vocab).
struct CopiedVocab {
  /// Every tokenizer.* key, in file order.
  std::vector<std::pair<std::string, MetaValue>> keys;
  uint32_t tokens = 0;
  /// tokenizer.ggml.eos_token_id, where present.
  std::optional<uint32_t> eos;
};

/// Reads the tokenizer keys of \p path into \p vocab; on failure returns
/// false and sets \p error ("<path>: ...").
bool readCopiedVocab(const std::string &path, CopiedVocab &vocab,
                     std::string &error) {
  std::unique_ptr<GgufFile> file =
      GgufFile::open(path, error, GgufContents::Shapes);
  if (!file)
    return false;
  for (const auto &[key, value] : file->info().metadata())
    if (key.starts_with("tokenizer."))
      vocab.keys.emplace_back(key, value);
  const MetaValue *tokens = file->info().findMeta("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufValueType::Array ||
      tokens->elemType != GgufValueType::String || tokens->array.empty()) {
    error = fmt::format("{}: tokenizer.ggml.tokens: {}", path,
                        tokens ? "not a nonempty array of strings"
                               : "missing (no vocabulary to copy)");
    return false;
  }
  if (tokens->array.size() > UINT32_MAX) {
    error = fmt::format("{}: tokenizer.ggml.tokens: too many tokens", path);
    return false;
  }
  vocab.tokens = static_cast<uint32_t>(tokens->array.size());
  if (const MetaValue *eos =
          file->info().findMeta("tokenizer.ggml.eos_token_id")) {
    std::optional<int64_t> id = eos->isInteger() ? eos->asInt() : std::nullopt;
    if (!id || *id < 0 || *id >= int64_t(vocab.tokens)) {
      error = fmt::format("{}: tokenizer.ggml.eos_token_id: {} is not a token "
                          "id of its {} tokens",
                          path, eos->toString(), vocab.tokens);
      return false;
    }
    vocab.eos = static_cast<uint32_t>(*id);
  }
  return true;
}

ModelInfo buildMetadata(const Preset &p, Arch arch, uint64_t seed,
                        std::string_view typesText,
                        const std::vector<SynthTensor> &tensors,
                        const std::vector<GgmlType> &types, bool shapesOnly,
                        uint32_t compressRatio, const CopiedVocab *vocab) {
  ModelInfo info;
  auto put = [&](std::string key, MetaValue v) {
    bool added = info.addMeta(std::move(key), std::move(v));
    (void)added;
    assert(added && "duplicate metadata key");
  };
  auto u32 = [](uint64_t v) { return MetaValue::makeUInt(v); };
  auto f32 = [](double v) { return MetaValue::makeFloat(v); };
  const std::string a = p.arch;

  // The file type names the type that holds the most weight elements.
  std::map<GgmlType, uint64_t> elements;
  bool quantised = false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].dims.size() < 2)
      continue;
    uint64_t n = 1;
    for (uint64_t d : tensors[i].dims)
      n *= d;
    elements[types[i]] += n;
    quantised |= ggmlTypeInfo(types[i]).blockSize > 1;
  }
  // Ties go to the type with the lower ggml id (the map's order).
  GgmlType mostly = GgmlType::F32;
  uint64_t most = 0;
  for (const auto &[type, n] : elements)
    if (n > most) {
      mostly = type;
      most = n;
    }

  put("general.architecture", MetaValue::makeString(a));
  put("general.name",
      MetaValue::makeString(fmt::format("strata synth {} {}", a, p.name)));
  put("general.description",
      MetaValue::makeString(fmt::format(
          "{}: strata-gguf synth --arch {} --preset {} --seed {} "
          "--types {}{}",
          shapesOnly ? "shapes only, no tensor data" : "random weights", a,
          p.name, seed, typesText, shapesOnly ? " --shapes-only" : "")));
  put("general.file_type", u32(fileTypeOf(mostly)));
  if (quantised)
    put("general.quantization_version", u32(2));

  put(a + ".context_length", u32(p.context));
  put(a + ".embedding_length", u32(p.embd));
  put(a + ".block_count", u32(p.layers));
  if (arch != Arch::Qwen4Exp)
    put(a + ".feed_forward_length", u32(p.ffn));
  put(a + ".attention.head_count", u32(p.heads));
  put(a + ".attention.head_count_kv", u32(p.headsKv));
  put(a + ".attention.key_length", u32(p.headDim));
  put(a + ".attention.value_length", u32(p.headDim));
  put(a + ".attention.layer_norm_rms_epsilon", f32(p.rmsEps));
  put(a + ".rope.freq_base", f32(p.ropeBase));
  put(a + ".rope.dimension_count", u32(p.ropeDims));
  if (arch == Arch::Qwen4Exp)
    qwen4expMetadata(p, compressRatio,
                     vocab        ? *vocab->eos
                     : p.realSize ? p.eosToken
                                  : buildVocab(p.vocab).endOfText,
                     put);
  else if (arch != Arch::Qwen3) {
    put(a + ".expert_count", u32(p.experts));
    put(a + ".expert_used_count", u32(p.expertUsed));
    put(a + ".expert_feed_forward_length", u32(p.expertFfn));
  }
  if (arch == Arch::Qwen3Next) {
    put(a + ".expert_shared_feed_forward_length", u32(p.sharedFfn));
    put(a + ".full_attention_interval", u32(p.fullAttnInterval));
    put(a + ".ssm.conv_kernel", u32(p.ssmConv));
    put(a + ".ssm.state_size", u32(p.ssmState));
    put(a + ".ssm.group_count", u32(p.ssmGroups));
    put(a + ".ssm.time_step_rank", u32(p.ssmVHeads));
    put(a + ".ssm.inner_size", u32(p.ssmInner));
  }

  if (shapesOnly)
    put(kShapesOnlyKey, MetaValue::makeBool(true));
  if (vocab) {
    for (const auto &[key, value] : vocab->keys)
      put(key, value);
    return info;
  }
  if (p.realSize) {
    put("tokenizer.ggml.model", MetaValue::makeString("no_vocab"));
    put("tokenizer.ggml.eos_token_id", u32(p.eosToken));
    return info;
  }
  Vocab v = buildVocab(p.vocab);
  put("tokenizer.ggml.model", MetaValue::makeString("gpt2"));
  put("tokenizer.ggml.pre", MetaValue::makeString("qwen2"));
  put("tokenizer.ggml.tokens",
      MetaValue::makeArray(GgufValueType::String, std::move(v.tokens)));
  put("tokenizer.ggml.token_type",
      MetaValue::makeArray(GgufValueType::Int32, std::move(v.types)));
  put("tokenizer.ggml.merges",
      MetaValue::makeArray(GgufValueType::String, std::move(v.merges)));
  put("tokenizer.ggml.bos_token_id", u32(v.endOfText));
  put("tokenizer.ggml.eos_token_id", u32(v.endOfText));
  put("tokenizer.ggml.padding_token_id", u32(v.endOfText));
  put("tokenizer.ggml.add_bos_token", MetaValue::makeBool(false));
  return info;
}

//===----------------------------------------------------------------------===//
// Types per tensor, values, output
//===----------------------------------------------------------------------===//

std::string dimsString(const std::vector<uint64_t> &dims) {
  std::string s;
  for (uint64_t d : dims)
    s += fmt::format("{}{}", s.empty() ? "" : ", ", d);
  return "[" + s + "]";
}

/// The type a tensor of \p type takes when its rows (\p cols elements) fit
/// no block of it: llama.cpp's choices where strata loads them (the IQ and
/// small K types -> iq4_nl, q6_k -> q8_0), else the nearest 32-block type
/// strata loads (q4_k -> q4_0 for llama.cpp's q5_0, q5_k -> q8_0 for q5_1);
/// f16 when no 32-element block fits either.
GgmlType fallbackType(GgmlType type, uint64_t cols) {
  GgmlType to = GgmlType::Q8_0;
  switch (type) {
  case GgmlType::IQ2_XXS:
  case GgmlType::IQ3_XXS:
  case GgmlType::IQ3_S:
  case GgmlType::IQ4_XS:
  case GgmlType::Q2_K:
  case GgmlType::Q3_K:
    to = GgmlType::IQ4_NL;
    break;
  case GgmlType::Q4_K:
    to = GgmlType::Q4_0;
    break;
  default:
    break;
  }
  return cols % ggmlTypeInfo(to).blockSize == 0 ? to : GgmlType::F16;
}

/// Chooses each tensor's type. Returns false after printing one error per
/// tensor that its type cannot hold; warns about rules that pick nothing.
bool resolveTypes(const std::vector<SynthTensor> &tensors, const TypeSpec &spec,
                  std::string_view what, std::vector<GgmlType> &types) {
  // Per rule: did it choose a type, match a 1-D tensor, lose to an earlier
  // rule? (The last two explain a rule that chose nothing.)
  const size_t n = spec.rules.size();
  std::vector<bool> used(n, false), matched1D(n, false), shadowed(n, false);
  bool ok = true;
  types.clear();
  std::map<std::pair<GgmlType, GgmlType>, std::vector<std::string>> fallbacks;
  for (const SynthTensor &t : tensors) {
    if (t.dims.size() < 2) {
      // llama.cpp reads norms, biases, ssm_a and the shared-expert gate as
      // f32 (llama-quantize never converts 1-D tensors).
      for (size_t r = 0; r < n; ++r)
        if (globMatch(spec.rules[r].glob, t.name))
          matched1D[r] = true;
      types.push_back(GgmlType::F32);
      continue;
    }
    GgmlType type = t.defaultF32 ? GgmlType::F32 : spec.defaultType;
    std::string source =
        t.defaultF32 ? "kept f32 unless a rule names it" : "the default type";
    bool chosen = false;
    for (size_t r = 0; r < n; ++r) {
      if (!globMatch(spec.rules[r].glob, t.name))
        continue;
      if (chosen) {
        shadowed[r] = true;
        continue;
      }
      chosen = used[r] = true;
      type = spec.rules[r].type;
      source = fmt::format("rule '{}'", spec.rules[r].text);
    }
    GgmlTypeInfo info = ggmlTypeInfo(type);
    if (!chosen && !t.defaultF32 && t.dims[0] % info.blockSize != 0) {
      // The default type's blocks do not fit these rows (qwen4exp's expert
      // down projections have K = 640): fall back per tensor as llama.cpp's
      // quantizer does, to a type strata loads, said once below.
      GgmlType to = fallbackType(type, t.dims[0]);
      fallbacks[{type, to}].push_back(t.name);
      type = to;
      info = ggmlTypeInfo(type);
    }
    if (t.dims[0] % info.blockSize != 0) {
      fmt::print(stderr,
                 "strata-gguf: error: synth: tensor '{}' {} cannot be {} "
                 "({}): its rows have {} elements, not a multiple of {}'s "
                 "block size {}\n",
                 t.name, dimsString(t.dims), info.irName, source, t.dims[0],
                 info.irName, info.blockSize);
      ok = false;
    }
    types.push_back(type);
  }
  for (const auto &[fromTo, names] : fallbacks) {
    std::string list;
    for (size_t i = 0; i < names.size() && i < 3; ++i)
      list += (i ? ", " : "") + names[i];
    if (names.size() > 3)
      list += fmt::format(" and {} more", names.size() - 3);
    fmt::print(stderr,
               "strata-gguf: synth: {} tensor{} whose rows fit no {} block "
               "use {} (llama.cpp's quantizer falls back likewise): {}\n",
               names.size(), names.size() == 1 ? "" : "s",
               ggmlTypeInfo(fromTo.first).irName,
               ggmlTypeInfo(fromTo.second).irName, list);
  }
  for (size_t r = 0; r < n; ++r) {
    if (used[r])
      continue;
    std::string why = "no tensor name matches it";
    if (shadowed[r] && matched1D[r])
      why = "earlier rules take the weights it matches, and 1-D tensors stay "
            "f32";
    else if (shadowed[r])
      why = "earlier rules take every weight it matches";
    else if (matched1D[r])
      why = "it matches only 1-D tensors, which stay f32";
    fmt::print(stderr,
               "strata-gguf: warning: synth: --types rule '{}' selects no "
               "tensor of {}: {}\n",
               spec.rules[r].text, what, why);
  }
  return ok;
}

/// The LM head's per-row scales (log-normal: token frequency in a trained
/// model, so the top logits stand apart instead of being near-ties), from
/// their own stream; empty for every other kind of tensor.
std::vector<double> headRowScales(const SynthTensor &t, uint64_t seed) {
  std::vector<double> rowScale;
  if (t.init != SynthInit::Head)
    return rowScale;
  uint64_t n = 1;
  for (uint64_t d : t.dims)
    n *= d;
  SynthRng rows = SynthRng::forTensor(seed, t.name + "#rows");
  rowScale.resize(n / t.dims[0]);
  for (double &r : rowScale)
    r = std::exp(0.75 * rows.normal());
  return rowScale;
}

/// Draws elements [first, first + count) of \p t's values (ggml element
/// order, ne0 fastest) into \p out from \p rng, which stands at element
/// \p first of the tensor's stream (SynthRng::forTensorAt).
void drawValues(const SynthTensor &t, const std::vector<double> &rowScale,
                SynthRng &rng, uint64_t first, uint64_t count, float *out) {
  const double sigma = 1.0 / std::sqrt(static_cast<double>(t.dims[0]));
  for (uint64_t i = first; i < first + count; ++i) {
    float &x = out[i - first];
    switch (t.init) {
    case SynthInit::Head:
      x = static_cast<float>(rowScale[i / t.dims[0]] * sigma * rng.normal());
      break;
    case SynthInit::FanIn:
      x = static_cast<float>(sigma * rng.normal());
      break;
    case SynthInit::Embed:
      x = static_cast<float>(6.0 * sigma * rng.normal());
      break;
    case SynthInit::Router:
      x = static_cast<float>(4.0 * sigma * rng.normal());
      break;
    case SynthInit::Residual:
      x = static_cast<float>(0.25 * sigma * rng.normal());
      break;

    case SynthInit::Norm:
      x = static_cast<float>(1.0 + 0.1 * rng.normal());
      break;
    case SynthInit::SsmA:
      x = static_cast<float>(-(1.0 + 15.0 * rng.uniform()));
      break;
    case SynthInit::DtBias: {
      // dt = softplus(bias) log-uniform in [1e-3, 1e-1]; the bias is its
      // inverse softplus, dt + log(1 - exp(-dt)).
      const double dt = std::exp(
          std::log(1e-3) + rng.uniform() * (std::log(1e-1) - std::log(1e-3)));
      x = static_cast<float>(dt + std::log(-std::expm1(-dt)));
      break;
    }
    }
  }
}

/// Draws and codes the values of \p t as \p type into \p bytes (sized),
/// rows shared out between threads: each thread starts its tensor stream at
/// its first row (SynthRng::forTensorAt) and draws pieces of rows into a
/// buffer of its own, so the bytes do not depend on the thread count and no
/// tensor is held as floats whole. Returns false if a row cannot be coded.
bool synthTensorBytes(const SynthTensor &t, GgmlType type, uint64_t seed,
                      bool fast, std::vector<uint8_t> &bytes) {
  uint64_t n = 1;
  for (uint64_t d : t.dims)
    n *= d;
  const std::vector<double> rowScale = headRowScales(t, seed);
  const int64_t rowLen = static_cast<int64_t>(t.dims[0]);
  const int64_t rowBytes = rowSizeInBytes(type, rowLen);
  const int64_t rows = static_cast<int64_t>(n) / rowLen;
  // A share must start at an even element (normals are drawn in pairs).
  const int64_t workers =
      n < (uint64_t(1) << 16) || rowLen % 2 != 0
          ? 1
          : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, rows);
  const int64_t pieceRows = std::max<int64_t>(1, (int64_t(1) << 16) / rowLen);
  std::atomic<bool> failed{false};
  auto share = [&](int64_t w) {
    const int64_t r0 = rows * w / workers, r1 = rows * (w + 1) / workers;
    SynthRng rng = SynthRng::forTensorAt(seed, t.name, r0 * rowLen);
    std::vector<float> values(pieceRows * rowLen);
    for (int64_t r = r0; r < r1 && !failed; r += pieceRows) {
      const int64_t count = std::min(pieceRows, r1 - r);
      drawValues(t, rowScale, rng, r * rowLen, count * rowLen, values.data());
      uint8_t *dst = bytes.data() + r * rowBytes;
      if (!(fast ? quantizeRowFast(type, values.data(), dst, count * rowLen)
                 : quantizeRow(type, values.data(), dst, count * rowLen))) {
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w) {
    try {
      pool.emplace_back(share, w);
    } catch (const std::system_error &) {
      share(w); // no thread to be had: do the share here
    }
  }
  share(0);
  for (std::thread &th : pool)
    th.join();
  return !failed;
}

bool parseSeed(std::string_view text, uint64_t &seed) {
  if (text.empty() || text.find_first_not_of("0123456789") != text.npos)
    return false;
  auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), seed);
  return ec == std::errc() && end == text.data() + text.size();
}

template <typename T> std::string joined(const std::vector<T> &items) {
  std::string s;
  for (const T &i : items)
    s += fmt::format("{}{}", s.empty() ? "" : ", ", i);
  return s;
}

} // namespace

std::vector<std::string> synthArchNames() {
  std::vector<std::string> out;
  for (const ArchInfo &a : kArchs)
    out.push_back(a.name);
  return out;
}

std::vector<std::string> synthPresetNames(std::string_view arch) {
  std::vector<std::string> out;
  for (const Preset &p : kPresets)
    if (arch == p.arch)
      out.push_back(p.name);
  return out;
}

std::vector<SynthTensor> synthTensors(std::string_view arch,
                                      std::string_view preset) {
  const ArchInfo *a = findArch(arch);
  const Preset *p = findPreset(arch, preset);
  if (!a || !p)
    return {};
  return buildTensors(a->arch, *p);
}

//===----------------------------------------------------------------------===//
// The command
//===----------------------------------------------------------------------===//

int synthMain(const std::vector<std::string> &args) {
  constexpr const char *kOptions[] = {
      "--arch", "--preset",         "--seed",   "--types", "--vocab",
      "-o",     "--compress-ratio", "--layers", "--quant"};
  auto isOption = [&](std::string_view s) {
    return std::find(std::begin(kOptions), std::end(kOptions), s) !=
           std::end(kOptions);
  };
  std::map<std::string, std::string> opts;
  std::vector<std::string> errors;
  bool shapesOnly = false;
  // Options given without a value (already reported, not "missing").
  std::vector<std::string> valueless;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kSynthUsage, stdout);
      return 0;
    }
    if (arg == "--shapes-only") {
      if (shapesOnly)
        errors.push_back("--shapes-only is given more than once");
      shapesOnly = true;
      continue;
    }
    std::string name = arg, value;
    bool haveValue = false;
    if (size_t eq = arg.find('='); arg.starts_with("--") && eq != arg.npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      haveValue = true;
    }
    if (!isOption(name)) {
      errors.push_back(arg.starts_with("-")
                           ? fmt::format("unknown option '{}'", arg)
                           : fmt::format("unexpected argument '{}'", arg));
      continue;
    }
    if (!haveValue) {
      if (i + 1 == args.size() || isOption(args[i + 1])) {
        errors.push_back(fmt::format("{} needs a value", name));
        valueless.push_back(name);
        continue;
      }
      value = args[++i];
    }
    if (!opts.emplace(name, value).second)
      errors.push_back(fmt::format("{} is given more than once", name));
  }

  auto get = [&](const char *name) -> const std::string * {
    auto it = opts.find(name);
    return it == opts.end() ? nullptr : &it->second;
  };
  auto missing = [&](const char *name) {
    return !get(name) && std::find(valueless.begin(), valueless.end(), name) ==
                             valueless.end();
  };
  const ArchInfo *arch = nullptr;
  const Preset *preset = nullptr;
  uint64_t seed = 0;
  std::optional<TypeSpec> spec = TypeSpec{};
  if (missing("--arch"))
    errors.push_back(
        fmt::format("missing --arch (one of: {})", joined(synthArchNames())));
  else if (const std::string *name = get("--arch");
           name && !(arch = findArch(*name)))
    errors.push_back(fmt::format("unknown --arch '{}' (known: {})", *name,
                                 joined(synthArchNames())));
  if (missing("--preset"))
    errors.push_back("missing --preset (e.g. --preset tiny)");
  else if (const std::string *name = get("--preset");
           name && arch && !(preset = findPreset(arch->name, *name)))
    errors.push_back(fmt::format("unknown --preset '{}' for {} (known: {})",
                                 *name, arch->name,
                                 joined(synthPresetNames(arch->name))));
  if (missing("--seed"))
    errors.push_back("missing --seed N");
  else if (const std::string *text = get("--seed");
           text && !parseSeed(*text, seed))
    errors.push_back(fmt::format("--seed '{}' is not a decimal integer in "
                                 "[0, 18446744073709551615]",
                                 *text));
  std::string typesText = "f32";
  if (const std::string *text = get("--types")) {
    typesText = *text;
    std::string error;
    spec = parseTypeSpec(*text, error);
    if (!spec)
      errors.push_back(error);
  }
  const std::string *out = get("-o");
  if (missing("-o"))
    errors.push_back("missing -o FILE");
  else if (out && out->empty())
    errors.push_back("-o needs a file name");

  uint32_t compressRatio = preset ? preset->compressRatio : 0;
  if (const std::string *text = get("--compress-ratio")) {
    uint32_t n = 0;
    auto [end, ec] =
        std::from_chars(text->data(), text->data() + text->size(), n);
    if (ec != std::errc() || end != text->data() + text->size() || n > 65536)
      errors.push_back(fmt::format("--compress-ratio '{}' is not an integer "
                                   "in 0..65536",
                                   *text));
    else if (arch && arch->arch != Arch::Qwen4Exp)
      errors.push_back("--compress-ratio applies to --arch qwen4exp only");
    else
      compressRatio = n;
  }
  std::optional<uint32_t> layers;
  if (const std::string *text = get("--layers")) {
    uint32_t n = 0;
    auto [end, ec] =
        std::from_chars(text->data(), text->data() + text->size(), n);
    // qwen4exp keeps its PLE layer.
    const uint32_t least = arch && arch->arch == Arch::Qwen4Exp && preset
                               ? preset->pleLayer + 1
                               : 1;
    if (ec != std::errc() || end != text->data() + text->size() ||
        (preset && (n < least || n > preset->layers)))
      errors.push_back(fmt::format(
          "--layers '{}' is not an integer in {}..{}", *text, least,
          preset ? std::to_string(preset->layers) : std::string("N")));
    else
      layers = n;
  }
  bool fast = false;
  if (const std::string *text = get("--quant")) {
    if (*text == "fast")
      fast = true;
    else if (*text != "search")
      errors.push_back(
          fmt::format("--quant '{}' is not 'search' or 'fast'", *text));
  }
  if (preset && preset->realSize && !shapesOnly)
    errors.push_back(fmt::format("--preset {} is real-size: it is written "
                                 "with --shapes-only (tensor infos, no data)",
                                 preset->name));

  if (!errors.empty()) {
    for (const std::string &e : errors)
      fmt::print(stderr, "strata-gguf: error: synth: {}\n", e);
    fmt::print(stderr, "(see strata-gguf synth --help)\n");
    return 2; // every one of them is a command-line mistake
  }

  // --vocab: the preset with the copied vocabulary's token count.
  std::optional<CopiedVocab> vocab;
  Preset withVocab = *preset;
  if (const std::string *path = get("--vocab")) {
    vocab.emplace();
    std::string err;
    if (!readCopiedVocab(*path, *vocab, err)) {
      fmt::print(stderr, "strata-gguf: error: synth: --vocab: {}\n", err);
      return 1;
    }
    if (arch->arch == Arch::Qwen4Exp && !vocab->eos) {
      fmt::print(stderr,
                 "strata-gguf: error: synth: --vocab: {}: qwen4exp needs "
                 "tokenizer.ggml.eos_token_id (its ple.eos_token_id)\n",
                 *path);
      return 1;
    }
    withVocab.vocab = vocab->tokens;
  }
  if (layers)
    withVocab.layers = *layers;
  preset = &withVocab;

  std::vector<SynthTensor> tensors = buildTensors(arch->arch, *preset);
  std::vector<GgmlType> types;
  // A --types rule the preset's tensors cannot take is a command-line
  // mistake too.
  if (!resolveTypes(tensors, *spec,
                    fmt::format("{} {}", arch->name, preset->name), types))
    return 2;

  // The description repeats the options that shape the file.
  std::string described = typesText;
  if (layers)
    described += fmt::format(" --layers {}", *layers);
  if (fast)
    described += " --quant fast";
  ModelInfo info =
      buildMetadata(*preset, arch->arch, seed, described, tensors, types,
                    shapesOnly, compressRatio, vocab ? &*vocab : nullptr);
  if (shapesOnly) {
    std::vector<TensorInfo> infos;
    for (size_t i = 0; i < tensors.size(); ++i) {
      TensorInfo ti;
      ti.name = tensors[i].name;
      ti.type = types[i];
      ti.dims = tensors[i].dims;
      infos.push_back(std::move(ti));
    }
    std::string err;
    if (!writeGgufShapesOnly(*out, info, infos, err)) {
      fmt::print(stderr, "strata-gguf: error: synth: {}\n", err);
      return 1;
    }
    return 0;
  }
  std::vector<GgufTensorData> data;
  data.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SynthTensor &t = tensors[i];
    GgufTensorData td;
    td.info.name = t.name;
    td.info.type = types[i];
    td.info.dims = t.dims;
    td.bytes.resize(td.info.numBytes());
    const bool failed = !synthTensorBytes(t, types[i], seed, fast, td.bytes);
    if (failed) {
      fmt::print(stderr,
                 "strata-gguf: error: synth: cannot quantise tensor '{}' "
                 "to {}\n",
                 t.name, ggmlTypeInfo(types[i]).irName);
      return 1;
    }
    data.push_back(std::move(td));
  }
  std::string err;
  if (!writeGguf(*out, info, data, err)) {
    fmt::print(stderr, "strata-gguf: error: synth: {}\n", err);
    return 1;
  }
  return 0;
}

} // namespace strata::tools
