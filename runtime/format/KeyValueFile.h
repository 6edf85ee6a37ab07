//===- KeyValueFile.h - model metadata as text ------------------*- C++ -*-===//
//
// A text stand-in for a GGUF header, used by tests and examples:
//
//   # comment
//   general.architecture = "qwen3"
//   qwen3.block_count = 2                 # integer -> u32 (i32 if negative)
//   qwen3.attention.layer_norm_rms_epsilon = 1e-6   # float -> f32
//   qwen3.flag = true
//   qwen3.attention.head_count_kv = [2, 2, 4]       # array
//   tensor blk.0.attn_q.weight q8_0 [256, 512]      # ggml order, ne0 first
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/ModelInfo.h"

#include <memory>
#include <string>
#include <string_view>

namespace strata::format {

/// Parses key/value text. On failure returns nullptr and sets \p error to
/// "<name>:<line>:<col>: <message>".
std::unique_ptr<ModelInfo> parseKeyValueText(std::string_view text,
                                             const std::string &name,
                                             std::string &error);

} // namespace strata::format
