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
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule)    \
  {OpKind::Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs},
#include "ir/Ops.def"
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
  default:
    return "?";
  }
}

const std::vector<AttrSpec> &attrSpecs(OpKind kind) {
  static const std::vector<std::vector<AttrSpec>> kSpecs = [] {
    std::vector<std::vector<AttrSpec>> all;
    for (const OpInfo &o : allOps()) {
      std::vector<AttrSpec> specs;
      std::string s = o.attrs;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t comma = s.find(',', pos);
        std::string item =
            s.substr(pos, comma == std::string::npos ? comma : comma - pos);
        size_t colon = item.find(':');
        AttrSpec a;
        a.name = item.substr(0, colon);
        a.kind = item.substr(colon + 1);
        if (!a.name.empty() && a.name.back() == '?') {
          a.optional = true;
          a.name.pop_back();
        }
        specs.push_back(a);
        if (comma == std::string::npos)
          break;
        pos = comma + 1;
      }
      all.push_back(std::move(specs));
    }
    return all;
  }();
  static const std::vector<AttrSpec> kNone;
  size_t i = static_cast<size_t>(kind);
  return i < kSpecs.size() ? kSpecs[i] : kNone;
}

} // namespace strata::ir
