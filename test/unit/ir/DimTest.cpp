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

TEST(Dim, FloorDivisionStaysSymbolicInT) {
  SourceMgr sm;
  std::ostringstream os;
  DiagnosticEngine diag(sm, os);
  std::map<std::string, Const> names{{"CR", Const::ofInt(64)}};
  EvalEnv env;
  env.names = &names;
  // `T / CR` as the parser builds it: an atom until CR is bound.
  Dim d = Dim::fromExpr(
      Expr::makeBinary("/", Expr::makeName("T"), Expr::makeName("CR")));
  EXPECT_FALSE(d.isPolynomial());
  EXPECT_FALSE(d.affineIn("T"));
  EXPECT_FALSE(d.isBound());
  auto s = d.substitute(names, env, diag, {});
  ASSERT_TRUE(s) << os.str();
  EXPECT_EQ(s->str(), "(T / 64)");
  EXPECT_TRUE(s->isBound());
  EXPECT_EQ(*s, Dim::floorDiv(Dim::symbol("T"), 64));
  EXPECT_EQ(s->affineIn("T"), (AffineDim{1, 64, 0}));
  // Substituting again is a fixed point.
  auto again = s->substitute(names, env, diag, {});
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *s);
  // Plain polynomials have div 1; exact divisions and constants fold.
  EXPECT_EQ(
      (Dim::constant(3) * Dim::symbol("T") + Dim::constant(2)).affineIn("T"),
      (AffineDim{3, 1, 2}));
  EXPECT_EQ(Dim::floorDiv(Dim::constant(130), 64), Dim::constant(2));
  EXPECT_EQ(Dim::floorDiv(Dim::constant(-1), 64), Dim::constant(-1));
  EXPECT_EQ(Dim::floorDiv(Dim::constant(128) * Dim::symbol("T"), 64),
            Dim::constant(2) * Dim::symbol("T"));
  // floor((2*T + 128) / 64) + 1 = floor(2*T / 64) + 3.
  Dim shifted =
      Dim::floorDiv(Dim::constant(2) * Dim::symbol("T") + Dim::constant(128),
                    64) +
      Dim::constant(1);
  EXPECT_EQ(shifted.affineIn("T"), (AffineDim{2, 64, 3}));
  // Not expressible: a multiple of a floor, or a remainder in the numerator.
  EXPECT_FALSE((Dim::constant(2) * *s).affineIn("T"));
  EXPECT_FALSE(
      Dim::floorDiv(Dim::symbol("T") + Dim::constant(1), 64).affineIn("T"));
  // Constant divisions of bound lets still evaluate to constants.
  std::map<std::string, Const> dh{{"D", Const::ofInt(100)},
                                  {"H", Const::ofInt(7)}};
  env.names = &dh;
  auto c = Dim::fromExpr(
               Expr::makeBinary("/", Expr::makeName("D"), Expr::makeName("H")))
               .substitute(dh, env, diag, {});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->constant(), 14);
  // Division by zero is still a diagnostic.
  std::map<std::string, Const> zero{{"CR", Const::ofInt(0)}};
  env.names = &zero;
  EXPECT_FALSE(d.substitute(zero, env, diag, {}));
  EXPECT_NE(os.str().find("dimension '(T / CR)' divides by 0"),
            std::string::npos)
      << os.str();
}
