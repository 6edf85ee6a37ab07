//===- DimTest.cpp - symbolic dims ----------------------------------------===//
#include "ir/Type.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace strata::ir;

TEST(Dim, CanonicalProducts) {
  Dim a = Dim::symbol("H") * Dim::symbol("HD");
  Dim b = Dim::symbol("HD") * Dim::symbol("H");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.str(), "H*HD");
}

TEST(Dim, SumsAndConstants) {
  Dim d = Dim::symbol("T") + Dim::constant(4) - Dim::constant(4);
  EXPECT_EQ(d, Dim::symbol("T"));
  Dim two = Dim::constant(2) * Dim::symbol("D");
  EXPECT_EQ((two + two).str(), "4*D");
  EXPECT_EQ(Dim::constant(0).str(), "0");
  EXPECT_EQ((Dim::constant(3) - Dim::symbol("T")).str(), "-T + 3");
}

TEST(Dim, ExactDivisionFolds) {
  ExprPtr e = Expr::makeBinary(
      "/", Expr::makeBinary("*", Expr::makeInt(2), Expr::makeName("D")),
      Expr::makeInt(2));
  EXPECT_EQ(Dim::fromExpr(e), Dim::symbol("D"));
  // D / H is not a polynomial: it becomes an opaque atom.
  ExprPtr opaque =
      Expr::makeBinary("/", Expr::makeName("D"), Expr::makeName("H"));
  Dim o = Dim::fromExpr(opaque);
  EXPECT_FALSE(o.isPolynomial());
  EXPECT_EQ(o.str(), "(D / H)");
  EXPECT_FALSE(Dim::provablyDifferent(o, Dim::constant(64)));
}

TEST(Dim, OverflowIsDetected) {
  Dim big = Dim::constant(INT64_MAX);
  EXPECT_TRUE((big + Dim::constant(1)).overflowed());
  EXPECT_TRUE((big * Dim::constant(2)).overflowed());
  EXPECT_FALSE(big.overflowed());
}

TEST(Dim, SubstituteBindsSymbols) {
  SourceMgr sm;
  std::ostringstream os;
  DiagnosticEngine diag(sm, os);
  std::map<std::string, Const> names{{"H", Const::ofInt(4)},
                                     {"HD", Const::ofInt(64)}};
  EvalEnv env;
  env.names = &names;
  Dim d = Dim::symbol("T") * Dim::symbol("H") * Dim::symbol("HD");
  auto s = d.substitute(names, env, diag, {});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->str(), "256*T");
  EXPECT_TRUE(s->isBound());
  auto bad = Dim::symbol("Q").substitute(names, env, diag, {});
  EXPECT_FALSE(bad);
  EXPECT_NE(os.str().find("unknown dimension symbol 'Q'"), std::string::npos);
}

TEST(ElemType, ParsesActivationAndBlockTypes) {
  EXPECT_EQ(ElemType::parse("f32")->str(), "f32");
  EXPECT_TRUE(ElemType::parse("iq3_s")->isBlock);
  EXPECT_FALSE(ElemType::parse("q2_k")); // not loadable
  EXPECT_FALSE(ElemType::parse("f33"));
  for (const char *t :
       {"q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "iq3_s",
        "iq3_xxs", "iq2_xxs", "f16", "bf16", "i32", "i64", "bool"})
    EXPECT_TRUE(ElemType::parse(t)) << t;
}
