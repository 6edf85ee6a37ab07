//===- Printer.cpp - deterministic text output ----------------------------===//
#include "ir/Printer.h"

#include <fmt/format.h>

namespace strata::ir {

namespace {

class Printer {
public:
  std::string run(const Module &m) {
    out_ += fmt::format("model {} {{\n", m.name);
    for (const LetDecl &let : m.lets)
      out_ += fmt::format("  let {} = {}\n", let.name, printExpr(*let.value));
    for (size_t k = 0; k < m.funcs.size(); ++k) {
      if (k || !m.lets.empty())
        out_ += "\n";
      printFunc(*m.funcs[k]);
    }
    out_ += "}\n";
    return std::move(out_);
  }

private:
  void indent(int level) { out_.append(size_t(level) * 2, ' '); }

  static std::string typeList(const std::vector<Type> &types) {
    if (types.size() == 1)
      return types[0].str();
    std::string s = "(";
    for (size_t k = 0; k < types.size(); ++k)
      s += (k ? ", " : "") + types[k].str();
    return s + ")";
  }

  void printFunc(const Func &f) {
    out_ += fmt::format("  func @{}(", f.name);
    for (size_t k = 0; k < f.params.size(); ++k) {
      const Param &p = f.params[k];
      if (k)
        out_ += ", ";
      if (p.isScalar())
        out_ += fmt::format("{}: {}", p.name,
                            p.scalarKind == Type::Kind::Int ? "int" : "float");
      else
        out_ += fmt::format(
            "%{}: {}{}", p.value->name, p.value->type.str(),
            p.value->offset ? fmt::format(" @{}", *p.value->offset) : "");
    }
    out_ += fmt::format(") -> {} {{\n", typeList(f.resultTypes));
    printBlock(f.body, 2);
    out_ += "  }\n";
  }

  void printBlock(const Block &b, int level) {
    for (const auto &op : b.ops)
      printOp(*op, level);
  }

  static std::string operand(const Operand &o) {
    if (o.value)
      return "%" + o.value->name;
    if (o.scalar)
      return printExpr(*o.scalar);
    const WeightRef &w = *o.weight;
    std::string s = "weight";
    if (w.elem)
      s += "<" + w.elem->str() + ">";
    s += "(" + printExpr(*w.name);
    if (w.shape)
      s += ", " + printDims(*w.shape);
    return s + ")";
  }

  void printOp(const Operation &op, int level) {
    indent(level);
    if (!op.results.empty()) {
      for (size_t k = 0; k < op.results.size(); ++k)
        out_ += (k ? ", %" : "%") + op.results[k]->name;
      out_ += " = ";
    }
    switch (op.kind) {
    case OpKind::Remark:
      out_ += "remark " + printExpr(*op.cond) + "\n";
      return;
    case OpKind::Return:
    case OpKind::Yield:
      out_ += op.kind == OpKind::Return ? "return" : "yield";
      for (size_t k = 0; k < op.operands.size(); ++k)
        out_ += (k ? ", " : " ") + operand(op.operands[k]);
      out_ += "\n";
      return;
    case OpKind::Repeat:
      out_ += fmt::format("repeat {} in {}..{} carry(", op.loopVar,
                          printExpr(*op.lo), printExpr(*op.hi));
      printBoundRegion(op, level);
      out_ += "\n";
      return;
    case OpKind::Fused: {
      out_ += fmt::format("fused \"{}\"(", op.callee);
      printBoundRegion(op, level);
      printAttrs(op);
      printTypesAndOffsets(op);
      return;
    }
    case OpKind::If:
      out_ += fmt::format("if {} {{\n", printExpr(*op.cond));
      printBlock(*op.regions[0], level + 1);
      indent(level);
      out_ += "} else {\n";
      printBlock(*op.regions[1], level + 1);
      indent(level);
      out_ += "}\n";
      return;
    case OpKind::Call:
      out_ += fmt::format("call @{}(", op.callee);
      break;
    case OpKind::Kernel:
      out_ += fmt::format("kernel<{}>(", op.callee);
      break;
    default:
      out_ += fmt::format("{}(", opName(op.kind));
      break;
    }
    for (size_t k = 0; k < op.operands.size(); ++k)
      out_ += (k ? ", " : "") + operand(op.operands[k]);
    out_ += ")";
    printAttrs(op);
    printTypesAndOffsets(op);
  }

  /// `%a = operand, ...) { body }` of repeat and fused.
  void printBoundRegion(const Operation &op, int level) {
    for (size_t k = 0; k < op.operands.size(); ++k)
      out_ +=
          fmt::format("{}%{} = {}", k ? ", " : "", op.regions[0]->args[k]->name,
                      operand(op.operands[k]));
    out_ += ") {\n";
    printBlock(*op.regions[0], level + 1);
    indent(level);
    out_ += "}";
  }

  void printAttrs(const Operation &op) {
    if (op.attrs.empty())
      return;
    out_ += " {";
    for (size_t k = 0; k < op.attrs.size(); ++k)
      out_ += fmt::format("{}{} = {}", k ? ", " : "", op.attrs[k].name,
                          printExpr(*op.attrs[k].value));
    out_ += "}";
  }

  void printTypesAndOffsets(const Operation &op) {
    // Result types are printed once all are known, so a re-parse checks them.
    std::vector<Type> types;
    for (const Value *r : op.results)
      if (r->type.isKnown())
        types.push_back(r->type);
    if (!types.empty() && types.size() == op.results.size())
      out_ += " : " + typeList(types);
    // Arena placement from plan-memory: `@ offset` per result, in order.
    for (size_t k = 0; k < op.results.size(); ++k)
      if (op.results[k]->offset)
        out_ += fmt::format("{}@{}", k ? ", " : " ", *op.results[k]->offset);
    out_ += "\n";
  }

  std::string out_;
};

} // namespace

std::string printModule(const Module &m) { return Printer().run(m); }

} // namespace strata::ir
