//===- StopStrings.h - hold back generated text that may stop ---*- C++ -*-===//
//
// Generated text streams out as it is made, but a stop string must not be
// shown, and it may arrive split over several tokens. StopStrings sits
// between the decoder and the output: it passes text on, except a tail that
// could still grow into a stop string, which it holds until the next text
// decides. When a stop string is complete, the text before it goes out and
// the stop string and everything after it do not. Of several, the one
// completed first in the stream counts (then the longest), so the result
// does not depend on how the text is cut into pieces.
//
// The bytes held are at most the longest stop string's length minus one, so
// the text shown lags the text made by no more than that.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::tokenizer {

/// Cuts a stream of text at the first occurrence of any of a set of strings.
class StopStrings {
public:
  /// \p stops: the strings to stop at (empty ones are ignored; none: every
  /// text passes at once).
  explicit StopStrings(std::vector<std::string> stops);

  /// Takes the next piece of text and appends to \p out what can be shown.
  /// Returns true when a stop string is complete: \p out then ends where it
  /// began and every later push() shows nothing.
  bool push(std::string_view text, std::string &out);
  /// At the end of the stream: appends the text held back (it began a stop
  /// string that never came) to \p out.
  void finish(std::string &out);

  /// True once a stop string was seen.
  bool stopped() const { return stopped_ != nullptr; }
  /// The stop string that was seen ("" before).
  std::string_view matched() const {
    return stopped_ ? std::string_view(*stopped_) : std::string_view();
  }
  /// Bytes currently held back.
  size_t heldBytes() const { return held_.size(); }

private:
  std::vector<std::string> stops_;
  std::string held_;
  const std::string *stopped_ = nullptr;
};

} // namespace strata::tokenizer
