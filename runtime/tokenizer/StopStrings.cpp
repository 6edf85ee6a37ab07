//===- StopStrings.cpp - hold back generated text that may stop -----------===//
#include "runtime/tokenizer/StopStrings.h"

#include <algorithm>

namespace strata::tokenizer {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (std::string &s : stops)
    if (!s.empty())
      stops_.push_back(std::move(s));
}

bool StopStrings::push(std::string_view text, std::string &out) {
  if (stopped_)
    return true;
  held_.append(text);
  // The stop string completed first: the one whose first occurrence ends
  // earliest (then the longest), which is what one byte per push would
  // find, however the text is cut into pieces. The held text never holds a
  // whole one, so any occurrence ends inside the new text.
  size_t first = std::string::npos, end = std::string::npos;
  for (const std::string &s : stops_) {
    size_t at = held_.find(s);
    if (at == std::string::npos)
      continue;
    if (at + s.size() < end || (at + s.size() == end && at < first)) {
      first = at;
      end = at + s.size();
      stopped_ = &s;
    }
  }
  if (stopped_) {
    out.append(held_, 0, first);
    held_.clear();
    return true;
  }
  // Hold the longest tail that begins some stop string: text before it
  // cannot be part of one, since a stop string starting there would
  // already be complete or would make a longer such tail.
  size_t hold = 0;
  for (const std::string &s : stops_)
    for (size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k)
      if (std::string_view(held_).substr(held_.size() - k) ==
          std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
  out.append(held_, 0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return false;
}

void StopStrings::finish(std::string &out) {
  out += held_;
  held_.clear();
}

} // namespace strata::tokenizer
