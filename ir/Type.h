//===- Type.h - element types, symbolic dims, tensor types ------*- C++ -*-===//
#pragma once

#include "ir/Expr.h"
#include "runtime/format/GgmlType.h"
#include "runtime/format/OpTable.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::ir {

/// Activation dtypes: the one table of runtime/format/DTypes.def.
using DType = format::DType;

/// An element type: an activation dtype or a GGUF block format (weights).
struct ElemType {
  bool isBlock = false;
  DType dtype = DType::F32;
  format::GgmlType block = format::GgmlType::F32;

  static ElemType of(DType d) { return {false, d, format::GgmlType::F32}; }
  static ElemType ofBlock(format::GgmlType g) { return {true, DType::F32, g}; }
  /// Parses "f32", "q4_k", ...; nullopt if unknown.
  static std::optional<ElemType> parse(std::string_view s);
  /// The element type of a GGUF tensor of ggml type \p g (F32 -> f32, ...).
  static ElemType fromGgml(format::GgmlType g);
  std::string str() const;
  bool isFloat() const {
    return !isBlock &&
           (dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16);
  }
  bool isInt() const {
    return !isBlock && (dtype == DType::I32 || dtype == DType::I64);
  }
  bool operator==(const ElemType &o) const {
    return isBlock == o.isBlock &&
           (isBlock ? block == o.block : dtype == o.dtype);
  }
};

/// `floor(coef*T / div) + constant` (div >= 1).
struct AffineDim {
  int64_t coef = 0;
  int64_t div = 1;
  int64_t constant = 0;
  bool operator==(const AffineDim &o) const {
    return coef == o.coef && div == o.div && constant == o.constant;
  }
};

/// A dimension: an integer polynomial over symbols (T, lets, parameters).
/// Sums of products with integer coefficients are kept canonical, so
/// `H*HD` equals `HD*H`; anything else (a division that is not exact, a
/// meta() call, ...) becomes an opaque atom named by its printed form. A
/// division of two polynomials that is not exact is a floor-division atom:
/// substitution re-evaluates it, so `T / CR` becomes `(T / 64)` once CR is
/// bound and stays symbolic in T (see affineIn).
class Dim {
public:
  Dim() = default;
  static Dim constant(int64_t v);
  static Dim symbol(const std::string &name);
  /// Converts an expression; opaque parts become atoms.
  static Dim fromExpr(const ExprPtr &e);

  bool isConstant() const;
  /// The value if constant.
  std::optional<int64_t> constant() const;
  /// True if only the symbol T (or nothing) occurs: fully bound.
  bool isBound() const;
  /// If the dim is `coef*sym + constant`, returns {coef, constant}.
  std::optional<std::pair<int64_t, int64_t>>
  linearIn(const std::string &sym) const;
  /// If the dim is `floor(coef*sym / div) + constant` (a polynomial
  /// `coef*sym + constant` has div 1), returns it.
  std::optional<AffineDim> affineIn(const std::string &sym) const;
  /// floor(\p n / \p d) for a constant \p d > 0: exact divisions and
  /// constants fold, anything else is a floor-division atom.
  static Dim floorDiv(const Dim &n, int64_t d);
  /// The dim as an expression (atoms by their expressions).
  ExprPtr toExpr() const;
  /// True if arithmetic overflowed 64 bits somewhere.
  bool overflowed() const;
  /// True if no opaque atom occurs, so equality is decided exactly.
  bool isPolynomial() const;
  /// True if \p a and \p b provably differ (both polynomial, not equal).
  static bool provablyDifferent(const Dim &a, const Dim &b) {
    return a != b && a.isPolynomial() && b.isPolynomial();
  }

  Dim operator+(const Dim &o) const;
  Dim operator-(const Dim &o) const;
  Dim operator*(const Dim &o) const;
  /// Exact division by a constant if every coefficient divides; else nullopt.
  std::optional<Dim> divExact(int64_t d) const;

  bool operator==(const Dim &o) const { return terms_ == o.terms_; }
  bool operator!=(const Dim &o) const { return !(*this == o); }

  /// Prints e.g. `T`, `2560`, `2*H*HD + 4`, `(D / H)`.
  std::string str() const;

  /// Replaces symbols by values: \p lookup returns the value of a symbol or
  /// nullopt to keep it. Atoms are re-evaluated through \p evalAtom.
  /// Returns nullopt (after a diagnostic) if evaluation fails.
  std::optional<Dim> substitute(const std::map<std::string, Const> &names,
                                const EvalEnv &env, DiagnosticEngine &diag,
                                SourceLoc loc) const;

private:
  using Monomial = std::vector<std::string>; // sorted symbol names
  std::map<Monomial, int64_t> terms_;        // no zero coefficients
  std::map<std::string, ExprPtr> atoms_;     // atom name -> expression
  void add(const Monomial &m, int64_t c);
};

/// The type of a value.
struct Type {
  enum class Kind { Unknown, Tensor, Int, Float };
  Kind kind = Kind::Unknown;
  ElemType elem;
  std::vector<Dim> dims;

  static Type unknown() { return {}; }
  static Type tensor(ElemType e, std::vector<Dim> d) {
    Type t;
    t.kind = Kind::Tensor;
    t.elem = e;
    t.dims = std::move(d);
    return t;
  }
  static Type scalarInt() {
    Type t;
    t.kind = Kind::Int;
    return t;
  }
  static Type scalarFloat() {
    Type t;
    t.kind = Kind::Float;
    return t;
  }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isKnown() const { return kind != Kind::Unknown; }
  size_t rank() const { return dims.size(); }
  /// `f32[T, 2560]`, `int`, `float`, `?`.
  std::string str() const;
  bool operator==(const Type &o) const {
    return kind == o.kind &&
           (kind != Kind::Tensor || (elem == o.elem && dims == o.dims));
  }
  bool operator!=(const Type &o) const { return !(*this == o); }
};

/// Prints a dim list `[a, b, c]`.
std::string printDims(const std::vector<Dim> &dims);

} // namespace strata::ir
