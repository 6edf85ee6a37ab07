//===- Rewrite.cpp - rewrite patterns, their driver, kernel fusion --------===//
#include "ir/Rewrite.h"

#include <algorithm>
#include <functional>
#include <map>

namespace strata::ir {

namespace {

void collectNames(const Block &b, std::set<std::string> &names) {
  for (const Value *a : b.args)
    names.insert(a->name);
  for (const auto &op : b.ops) {
    for (const Value *r : op->results)
      names.insert(r->name);
    for (const auto &region : op->regions)
      collectNames(*region, names);
  }
}

} // namespace

Rewriter::Rewriter(Func &f) : func_(f) {
  for (const Param &p : f.params)
    if (!p.isScalar())
      names_.insert(p.value->name);
  collectNames(f.body, names_);
  rebuild();
}

void Rewriter::rebuild() {
  du_ = std::make_unique<DefUse>(func_.body);
  pos_.clear();
  for (size_t i = 0; i < func_.body.ops.size(); ++i)
    pos_[func_.body.ops[i].get()] = i;
}

size_t Rewriter::position(const Operation *op) const {
  auto it = pos_.find(op);
  return it == pos_.end() ? SIZE_MAX : it->second;
}

std::string Rewriter::freshName(const std::string &base) {
  std::string name = base;
  for (int i = 1; names_.count(name); ++i)
    name = base + "." + std::to_string(i);
  names_.insert(name);
  return name;
}

std::optional<Rewriter::Plan>
Rewriter::analyse(const std::vector<Operation *> &groupIn) const {
  Plan plan;
  std::vector<Operation *> &group = plan.group;
  group = groupIn;
  // States live outside the arena: the ops that declare or write one, and
  // the readers of one, stay kernels of their own. A state write's other
  // results (the delta rule's output, the convolved rows) are arena values
  // like any other: their readers fuse (the decode step's gated norm after
  // gated_delta_cached).
  for (Operation *op : group) {
    if (position(op) == SIZE_MAX || op->kind == OpKind::Return ||
        isStateDecl(*op) || writesState(*op))
      return std::nullopt;
    for (const Operand &o : op->operands)
      if (const Operation *d = o.isValue() ? du_->definingOp(o.value) : nullptr)
        if (isStateDecl(*d) || (writesState(*d) && o.value == d->results[0]))
          return std::nullopt;
  }
  std::sort(group.begin(), group.end(), [&](Operation *a, Operation *b) {
    return position(a) < position(b);
  });
  group.erase(std::unique(group.begin(), group.end()), group.end());
  std::set<const Operation *> inGroup(group.begin(), group.end());
  std::set<const Value *> defined;
  for (Operation *op : group)
    for (const Value *r : op->results)
      defined.insert(r);

  // Inputs in order of first read; outputs are values read outside.
  for (Operation *op : group)
    for (const Operand &o : op->operands)
      if (o.isValue() && !defined.count(o.value) &&
          std::find(plan.inputs.begin(), plan.inputs.end(), o.value) ==
              plan.inputs.end())
        plan.inputs.push_back(o.value);
  for (Operation *op : group)
    for (Value *r : op->results)
      for (const Use &u : du_->uses(r))
        if (!inGroup.count(u.user)) {
          plan.outputs.push_back(r);
          break;
        }
  if (plan.outputs.empty())
    return std::nullopt;

  // Where the kernel can go.
  const size_t first = position(group.front()), last = position(group.back());
  bool atFirst = true;
  for (size_t p = first + 1; p < last; ++p) {
    const Operation &op = *func_.body.ops[p];
    if (inGroup.count(&op))
      continue;
    for (const Operand &o : op.operands)
      if (o.isValue() && defined.count(o.value))
        plan.atLast = false;
  }
  for (const Value *in : plan.inputs) {
    const Operation *d = du_->definingOp(in);
    size_t p = d ? position(d) : 0;
    if (d && p != SIZE_MAX && p > first)
      atFirst = false;
  }
  if (!plan.atLast && !atFirst)
    return std::nullopt;
  return plan;
}

bool Rewriter::canFuse(const std::vector<Operation *> &group) const {
  return analyse(group).has_value();
}

Operation *
Rewriter::fuse(const std::vector<Operation *> &groupIn, const std::string &name,
               const std::vector<std::pair<Value *, Value *>> &ties) {
  std::optional<Plan> plan = analyse(groupIn);
  if (!plan)
    return nullptr;
  const std::vector<Operation *> &group = plan->group;
  const std::vector<Value *> &inputs = plan->inputs, &outputs = plan->outputs;
  std::set<const Operation *> inGroup(group.begin(), group.end());
  const size_t first = position(group.front()), last = position(group.back());
  const bool atLast = plan->atLast;
  lastStart_ = first;

  auto fused = std::make_unique<Operation>();
  fused->kind = OpKind::Fused;
  fused->callee = name;
  fused->loc = group.front()->loc;
  auto body = std::make_unique<Block>();
  std::map<const Value *, Value *> argOf;
  for (Value *in : inputs) {
    Operand o;
    o.value = in;
    o.loc = fused->loc;
    fused->operands.push_back(o);
    Value *arg = func_.newValue(freshName(in->name + ".in"), in->type, in->loc);
    argOf[in] = arg;
    body->args.push_back(arg);
  }
  // Results replace the outputs outside the kernel; inside, the old values
  // stay (their names too: the body's scope ends before the results').
  std::vector<Value *> results;
  for (Value *out : outputs) {
    Value *r = func_.newValue(out->name, out->type, out->loc);
    results.push_back(r);
    fused->results.push_back(r);
    fused->declaredTypes.push_back(out->type);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    std::vector<Use> uses = du_->uses(outputs[k]);
    for (const Use &u : uses)
      if (!inGroup.count(u.user))
        u.user->operands[u.operand].value = results[k];
  }
  // Ties: result k overwrites input i when nothing after the group reads
  // input i.
  std::vector<int> tied(outputs.size(), -1);
  bool anyTie = false;
  for (const auto &[res, over] : ties) {
    auto ok = std::find(outputs.begin(), outputs.end(), res);
    auto ik = std::find(inputs.begin(), inputs.end(), over);
    if (ok == outputs.end() || ik == inputs.end())
      continue;
    bool readLater = false;
    for (const Use &u : du_->uses(over))
      if (!inGroup.count(u.user) &&
          (position(u.user) == SIZE_MAX || position(u.user) > first))
        readLater = true;
    if (readLater || !(res->type == over->type))
      continue;
    tied[ok - outputs.begin()] = static_cast<int>(ik - inputs.begin());
    anyTie = true;
  }
  if (anyTie) {
    auto list = std::make_shared<Expr>();
    list->kind = ExprKind::List;
    for (int t : tied) {
      auto e = std::make_shared<Expr>();
      if (t >= 0) {
        e->kind = ExprKind::Int;
        e->i = t;
      } else {
        e->kind = ExprKind::Unary;
        e->s = "-";
        auto one = std::make_shared<Expr>();
        one->kind = ExprKind::Int;
        one->i = 1;
        e->args.push_back(one);
      }
      list->args.push_back(e);
    }
    fused->attrs.push_back(Attr{"tied", list, fused->loc});
  }

  // Move the ops into the body, reading block arguments for inputs.
  std::vector<std::unique_ptr<Operation>> &ops = func_.body.ops;
  for (Operation *op : group) {
    for (Operand &o : op->operands)
      if (o.isValue())
        if (auto it = argOf.find(o.value); it != argOf.end())
          o.value = it->second;
    auto it = std::find_if(ops.begin(), ops.end(),
                           [&](const auto &p) { return p.get() == op; });
    body->ops.push_back(std::move(*it));
  }
  auto yield = std::make_unique<Operation>();
  yield->kind = OpKind::Yield;
  yield->loc = fused->loc;
  for (Value *out : outputs) {
    Operand o;
    o.value = out;
    o.loc = fused->loc;
    yield->operands.push_back(o);
  }
  body->ops.push_back(std::move(yield));
  fused->regions.push_back(std::move(body));

  Operation *result = fused.get();
  // The moved-out slots are null; the kernel takes the chosen one.
  size_t at = atLast ? last : first;
  ops[at] = std::move(fused);
  ops.erase(std::remove(ops.begin(), ops.end(), nullptr), ops.end());

  // The def-use chains, updated in place (a rebuild per fusion would make
  // fusing a whole model quadratic).
  Block *inner = result->regions[0].get();
  du_->setBlock(result, &func_.body);
  for (auto &opPtr : inner->ops)
    du_->setBlock(opPtr.get(), inner);
  auto byGroup = [&](const Use &u) { return inGroup.count(u.user) > 0; };
  for (size_t i = 0; i < inputs.size(); ++i) {
    du_->removeUsesIf(inputs[i], byGroup);
    du_->addUse(inputs[i], {result, i});
  }
  for (Operation *op : group)
    for (size_t i = 0; i < op->operands.size(); ++i)
      if (op->operands[i].isValue() &&
          std::find(inner->args.begin(), inner->args.end(),
                    op->operands[i].value) != inner->args.end())
        du_->addUse(op->operands[i].value, {op, i});
  Operation *yieldOp = inner->ops.back().get();
  for (size_t k = 0; k < outputs.size(); ++k) {
    du_->setDefiningOp(results[k], result);
    for (const Use &u : du_->uses(outputs[k]))
      if (!inGroup.count(u.user))
        du_->addUse(results[k], u);
    du_->removeUsesIf(outputs[k],
                      [&](const Use &u) { return !inGroup.count(u.user); });
    du_->addUse(outputs[k], {yieldOp, k});
  }
  pos_.clear();
  for (size_t i = 0; i < ops.size(); ++i)
    pos_[ops[i].get()] = i;
  return result;
}

Operation *Rewriter::fuseKernels(const std::vector<Operation *> &members,
                                 const std::string &name) {
  std::vector<Operation *> ops;
  for (Operation *m : members) {
    if (m->kind != OpKind::Fused) {
      ops.push_back(m);
      continue;
    }
    std::vector<Operation *> inner = unfuse(m);
    if (inner.empty())
      return nullptr;
    ops.insert(ops.end(), inner.begin(), inner.end());
  }
  return fuse(ops, name);
}

std::vector<Operation *> Rewriter::unfuse(Operation *op) {
  const size_t at = position(op);
  if (at == SIZE_MAX || op->kind != OpKind::Fused || op->regions.size() != 1 ||
      op->findAttr("tied"))
    return {};
  Block &inner = *op->regions[0];
  if (inner.ops.empty() || inner.ops.back()->kind != OpKind::Yield ||
      inner.args.size() != op->operands.size() ||
      inner.ops.back()->operands.size() != op->results.size())
    return {};
  std::map<const Value *, Value *> outer;
  for (size_t i = 0; i < inner.args.size(); ++i)
    outer[inner.args[i]] = op->operands[i].value;
  for (auto &o : inner.ops)
    for (Operand &x : o->operands)
      if (x.isValue())
        if (auto it = outer.find(x.value); it != outer.end())
          x.value = it->second;
  // Readers of the kernel's results read the yielded values.
  const Operation &yield = *inner.ops.back();
  for (size_t k = 0; k < op->results.size(); ++k) {
    Value *in = yield.operands[k].value;
    for (const Use &u : du_->uses(op->results[k]))
      u.user->operands[u.operand].value = in;
  }
  std::vector<std::unique_ptr<Operation>> moved;
  for (size_t i = 0; i + 1 < inner.ops.size(); ++i)
    moved.push_back(std::move(inner.ops[i]));
  std::vector<Operation *> ops;
  for (auto &m : moved)
    ops.push_back(m.get());
  std::vector<std::unique_ptr<Operation>> &body = func_.body.ops;
  body.erase(body.begin() + static_cast<long>(at));
  body.insert(body.begin() + static_cast<long>(at),
              std::make_move_iterator(moved.begin()),
              std::make_move_iterator(moved.end()));
  lastStart_ = at;
  rebuild();
  return ops;
}

size_t applyPatterns(Func &f,
                     const std::vector<std::unique_ptr<RewritePattern>> &ps) {
  Rewriter rw(f);
  size_t rewrites = 0;
  // Each rewrite removes at least one op from the body or leaves it alone,
  // so a pass over the body after the last rewrite ends the loop; the bound
  // guards against a pattern that keeps rewriting in circles.
  const size_t bound = 4 * f.body.ops.size() + 16;
  for (size_t i = 0; i < f.body.ops.size() && rewrites < bound;) {
    bool changed = false;
    for (const auto &p : ps) {
      if (p->matchAndRewrite(*f.body.ops[i], rw)) {
        changed = true;
        ++rewrites;
        break;
      }
    }
    // After a rewrite, resume at its first op: the ops after the group
    // moved up (a fusion of n ops removes n - 1), and those it passed may
    // match now.
    if (!changed)
      ++i;
    else
      i = std::min({i, rw.lastRewriteStart(), f.body.ops.size()});
  }
  return rewrites;
}

} // namespace strata::ir
