//===- StopStringsTest.cpp - holding back text that may become a stop -----===//
#include "runtime/tokenizer/StopStrings.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace strata::tokenizer;

namespace {

/// Pushes \p pieces one by one; returns what was shown after each push
/// (joined by '|') and, at the end, what finish() released (after '#').
std::string stream(StopStrings &s, const std::vector<std::string> &pieces) {
  std::string log;
  for (const std::string &p : pieces) {
    std::string out;
    bool stop = s.push(p, out);
    log += out + (stop ? "!" : "") + "|";
    if (stop)
      return log;
  }
  std::string rest;
  s.finish(rest);
  return log + "#" + rest;
}

TEST(StopStrings, NoStopsPassEverythingAtOnce) {
  StopStrings s({});
  EXPECT_EQ(stream(s, {"ab", "c", ""}), "ab|c||#");
  EXPECT_FALSE(s.stopped());
}

TEST(StopStrings, AStopInsideOnePieceCutsThere) {
  StopStrings s({"END"});
  EXPECT_EQ(stream(s, {"abc", "xENDyz"}), "abc|x!|");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.matched(), "END");
  // Later text shows nothing.
  std::string out;
  EXPECT_TRUE(s.push("more", out));
  EXPECT_EQ(out, "");
}

TEST(StopStrings, AStopOverSeveralPiecesIsHeldThenDropped) {
  StopStrings s({"<stop>"});
  // "<s" might begin the stop: held; "to" still might; "p>" completes it.
  EXPECT_EQ(stream(s, {"ab<s", "to", "p>cd"}), "ab||!|");
  EXPECT_EQ(s.matched(), "<stop>");
}

TEST(StopStrings, HeldTextThatDoesNotStopIsReleased) {
  StopStrings s({"<stop>"});
  // "<st" is held, then "x" shows it cannot be the stop.
  EXPECT_EQ(stream(s, {"a<st", "x"}), "a|<stx|#");
  StopStrings t({"<stop>"});
  // At the end of the stream the held tail goes out.
  EXPECT_EQ(stream(t, {"a<st"}), "a|#<st");
}

TEST(StopStrings, HoldsOnlyTheLongestTailThatBeginsAStop) {
  StopStrings s({"aab"});
  // "xaaa": only the last "aa" may begin "aab"; a "b" completes it there.
  std::string out;
  EXPECT_FALSE(s.push("xaaa", out));
  EXPECT_EQ(out, "xa");
  EXPECT_EQ(s.heldBytes(), 2u);
  out.clear();
  EXPECT_TRUE(s.push("b", out));
  EXPECT_EQ(out, "");
}

TEST(StopStrings, TheStopCompletedFirstWinsHoweverTheTextIsCut) {
  // "b" ends before "cd"; "c" ends before "abcd" though it begins later.
  for (std::vector<std::string> pieces :
       {std::vector<std::string>{"abcd"}, {"a", "b", "c", "d"}, {"ab", "cd"}}) {
    StopStrings s({"cd", "bcx", "b"});
    EXPECT_EQ(stream(s, pieces).substr(0, 1), "a");
    EXPECT_EQ(s.matched(), "b");
    StopStrings t({"abcd", "c"});
    std::string shown = stream(t, pieces);
    shown.erase(std::remove(shown.begin(), shown.end(), '|'), shown.end());
    EXPECT_EQ(shown, "ab!");
    EXPECT_EQ(t.matched(), "c");
  }
  // Two ending at one byte: the longer.
  StopStrings u({"bc", "abc"});
  EXPECT_EQ(stream(u, {"xa", "bc"}), "x|!|");
  EXPECT_EQ(u.matched(), "abc");
}

TEST(StopStrings, MultiByteCharactersSplitOverPieces) {
  // "é" is C3 A9: a stop string ending in its first byte is no match for
  // a different character beginning with C3.
  StopStrings s({"x\xc3\xa9"});
  EXPECT_EQ(stream(s, {"ax\xc3", "\xa8", "bx\xc3", "\xa9"}),
            "a|x\xc3\xa8|b|!|");
}

TEST(StopStrings, EmptyStopsAreIgnored) {
  StopStrings s({"", "z"});
  EXPECT_EQ(stream(s, {"abc"}), "abc|#");
}

} // namespace
