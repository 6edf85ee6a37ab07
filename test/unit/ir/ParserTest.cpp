//===- ParserTest.cpp - parse, print, verify ------------------------------===//
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <sstream>

using namespace strata::ir;

namespace {

struct Parsed {
  std::unique_ptr<Module> module;
  std::string diags;
  unsigned errors = 0;
};

Parsed parseAndVerify(const std::string &text) {
  SourceMgr sm;
  std::ostringstream os;
  DiagnosticEngine diag(sm, os);
  uint32_t buf = sm.addBuffer("test.strata", text);
  Parsed p;
  p.module = parseModule(sm, buf, diag);
  if (p.module && !verifyModule(*p.module, diag))
    p.module.reset();
  p.diags = os.str();
  p.errors = diag.errorCount();
  return p;
}

const char *kSmall = R"(model m {
  let D = 8
  func @f(%x: f32[T, D], s: float) -> f32[T, D] {
    %y = scale(%x) {s = s}
    return %y
  }
  func @main(%x: f32[T, D]) -> f32[T, D] {
    %h = repeat i in 0..2 carry(%c = %x) {
      %n = call @f(%c, 0.5)
      yield %n
    }
    %r = if D > 4 {
      %a = silu(%h)
      yield %a
    } else {
      yield %h
    }
    return %r
  }
}
)";

} // namespace

TEST(Parser, RoundTripIsIdentical) {
  Parsed a = parseAndVerify(kSmall);
  ASSERT_TRUE(a.module) << a.diags;
  std::string once = printModule(*a.module);
  Parsed b = parseAndVerify(once);
  ASSERT_TRUE(b.module) << b.diags;
  EXPECT_EQ(once, printModule(*b.module));
  EXPECT_NE(once.find("%a = silu(%h) : f32[T, D]"), std::string::npos) << once;
}

TEST(Parser, ErrorHasLocationSourceLineAndCaret) {
  Parsed p = parseAndVerify("model m {\n  func @main() -> f32[T] {\n"
                            "    %x = frobnicate()\n    return %x\n  }\n}\n");
  EXPECT_FALSE(p.module);
  EXPECT_NE(p.diags.find("test.strata:3:10: error: unknown op 'frobnicate'"),
            std::string::npos)
      << p.diags;
  EXPECT_NE(p.diags.find("    %x = frobnicate()\n         ^\n"),
            std::string::npos)
      << p.diags;
}

TEST(Parser, RecoversAndReportsSeveralErrors) {
  Parsed p =
      parseAndVerify("model m {\n  func @main(%a: f32[4]) -> f32[4] {\n"
                     "    %x = bogus1(%a)\n    %y = bogus2(%a)\n"
                     "    %z = neg(%undefined)\n    return %a\n  }\n}\n");
  EXPECT_FALSE(p.module);
  EXPECT_EQ(p.errors, 3u) << p.diags;
}

TEST(Parser, DeepNestingIsBoundedNotACrash) {
  std::string expr(100000, '(');
  Parsed p = parseAndVerify("model m {\n  let x = " + expr + "\n}\n");
  EXPECT_FALSE(p.module);
  EXPECT_NE(p.diags.find("nested too deeply"), std::string::npos);
}

TEST(Parser, ErrorCountIsCapped) {
  std::string text = "model m {\n";
  for (int i = 0; i < 100; ++i)
    text += "  bogus\n";
  text += "}\n";
  Parsed p = parseAndVerify(text);
  EXPECT_FALSE(p.module);
  EXPECT_NE(p.diags.find("too many errors"), std::string::npos);
  EXPECT_LT(p.diags.size(), 20000u);
}

TEST(Parser, RandomBytesNeverCrash) {
  // Seeded differently each run: the property must hold for any input.
  std::random_device rd;
  std::mt19937 rng(rd());
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    size_t n = rng() % 200;
    for (size_t k = 0; k < n; ++k)
      text += static_cast<char>(rng() % 256);
    if (iter % 2)
      text = std::string(kSmall).substr(0, rng() % std::strlen(kSmall)) + text;
    Parsed p = parseAndVerify(text);
    if (p.module) {
      // Whatever parses must print and re-parse identically.
      std::string once = printModule(*p.module);
      Parsed again = parseAndVerify(once);
      ASSERT_TRUE(again.module) << once << again.diags;
      EXPECT_EQ(once, printModule(*again.module));
    }
  }
}
