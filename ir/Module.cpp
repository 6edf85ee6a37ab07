//===- Module.cpp - modules, functions, operations, values ----------------===//
#include "ir/Module.h"

#include <map>

namespace strata::ir {

Type Operand::type() const {
  if (value)
    return value->type;
  if (weight && weight->elem && weight->shape)
    return Type::tensor(*weight->elem, *weight->shape);
  return Type::unknown();
}

const Attr *Operation::findAttr(const std::string &name) const {
  for (const Attr &a : attrs)
    if (a.name == name)
      return &a;
  return nullptr;
}

std::vector<int> tiedOperands(const Operation &op) {
  const Attr *a = op.kind == OpKind::Fused ? op.findAttr("tied") : nullptr;
  if (!a || a->value->kind != ExprKind::List)
    return {};
  std::vector<int> tied;
  for (const ExprPtr &e : a->value->args) {
    int i = -1;
    if (e->kind == ExprKind::Int && e->i >= 0 &&
        static_cast<size_t>(e->i) < op.operands.size() &&
        op.operands[e->i].isValue())
      i = static_cast<int>(e->i);
    tied.push_back(i);
  }
  return tied;
}

bool isStateDecl(const Operation &op) { return op.kind == OpKind::State; }

bool writesState(const Operation &op) {
  if (const OpInfo *info = opInfo(op.kind))
    return info->cls == format::OpClass::State;
  if (op.kind != OpKind::Kernel)
    return false;
  const format::RecipeInfo *r = format::lookupRecipe(op.callee);
  return r && r->cls == format::OpClass::State;
}

bool isElementwise(const Operation &op) {
  const OpInfo *info = opInfo(op.kind);
  return info && (info->cls == format::OpClass::Unary ||
                  info->cls == format::OpClass::Binary);
}

std::set<const Value *> stateValues(const Block &b) {
  std::set<const Value *> out;
  for (const auto &op : b.ops)
    if ((isStateDecl(*op) || writesState(*op)) && !op->results.empty())
      out.insert(op->results[0]);
  return out;
}

Value *Func::newValue(std::string name, Type type, SourceLoc loc) {
  values_.push_back(Value{std::move(name), std::move(type), loc, {}});
  return &values_.back();
}

Func *Module::findFunc(const std::string &name) const {
  for (const auto &f : funcs)
    if (f->name == name)
      return f.get();
  return nullptr;
}

const std::vector<OpInfo> &allOps() {
  static const std::vector<OpInfo> kOps = {
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule,    \
           Cost, Class)                                                        \
  {OpKind::Id, Mnemonic, MinOperands,           MaxOperands,                   \
   NumResults, Attrs,    format::OpClass::Class},
#include "runtime/format/Ops.def"
  };
  return kOps;
}

const OpInfo *opInfo(OpKind kind) {
  const auto &ops = allOps();
  size_t i = static_cast<size_t>(kind);
  return i < ops.size() ? &ops[i] : nullptr;
}

const OpInfo *lookupOp(std::string_view mnemonic) {
  for (const OpInfo &o : allOps())
    if (mnemonic == o.mnemonic)
      return &o;
  return nullptr;
}

const char *opName(OpKind kind) {
  if (const OpInfo *o = opInfo(kind))
    return o->mnemonic;
  switch (kind) {
  case OpKind::Call:
    return "call";
  case OpKind::Repeat:
    return "repeat";
  case OpKind::If:
    return "if";
  case OpKind::Return:
    return "return";
  case OpKind::Yield:
    return "yield";
  case OpKind::Kernel:
    return "kernel";
  case OpKind::Remark:
    return "remark";
  case OpKind::Fused:
    return "fused";
  default:
    return "?";
  }
}

const std::vector<AttrSpec> &attrSpecs(OpKind kind) {
  static const std::vector<AttrSpec> kNone;
  return opInfo(kind) ? format::attrSchema(recipeOf(kind)) : kNone;
}

} // namespace strata::ir
