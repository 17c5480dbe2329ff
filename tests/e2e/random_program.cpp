// The random program generator (contract in random_program.hpp).
#include "e2e/random_program.hpp"

#include <algorithm>
#include <functional>
#include <random>
#include <unordered_map>
#include <vector>

namespace symmflow::e2e {

namespace {

using ir::Arg;

struct Info {
  bool contiguous = true;
  bool view = false;    // made by a view op: never written
  bool viewed = false;  // a view of it exists: never written again
};

class Generator {
 public:
  explicit Generator(const ProgramOptions& o)
      : o_(o), rng_(o.seed * 0x9E3779B97F4A7C15ull + uint64_t(o.world_size)) {
    g_ = std::make_unique<ir::Graph>("random", o.world_size);
    g_->add_group({"tp", 0, {}, {}});
    g_->add_group({"sub", o.world_size % 2 == 0 ? 2 : 1, {}, {}});
  }

  Program run() {
    static const DType kTypes[] = {DType::f32, DType::f32, DType::f64, DType::bf16, DType::f16};
    dtype_ = kTypes[pick(5)];
    count("dtype " + std::string(dtype_name(dtype_)));
    int inputs = 2 + int(pick(3));
    for (int i = 0; i < inputs; ++i) new_input(random_shape());
    int ops = o_.ops / 2 + int(pick(size_t(o_.ops)));
    for (int i = 0; i < ops; ++i) step();
    std::vector<ir::Value*> outs{vals_.back()};
    for (int k = 0; k < 2; ++k) {
      ir::Value* v = vals_[pick(vals_.size())];
      if (std::find(outs.begin(), outs.end(), v) == outs.end()) outs.push_back(v);
    }
    g_->set_outputs(outs);
    return {std::move(g_), std::move(features_)};
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int64_t dim() { return std::array<int64_t, 3>{4, 8, 12}[pick(3)]; }
  Shape random_shape() { return {dim(), dim()}; }
  void count(const std::string& f) { ++features_[f]; }
  const Shape& shape(ir::Value* v) const { return v->type().shape; }

  ir::Value* new_input(const Shape& s) {
    ir::Value* v = g_->add_input(g_->fresh_name("in"), {dtype_, s});
    add(v, {});
    return v;
  }
  void add(ir::Value* v, Info i) {
    info_[v] = i;
    vals_.push_back(v);
  }
  ir::Value* fresh(ir::Node* n) {  // a fresh contiguous result
    add(n->output(), {});
    return n->output();
  }

  // Recent values are likelier operands; `ok` filters.
  ir::Value* operand(const std::function<bool(ir::Value*)>& ok = {}) {
    std::vector<ir::Value*> c;
    for (ir::Value* v : vals_) {
      if (!ok || ok(v)) c.push_back(v);
    }
    if (c.empty()) return nullptr;
    size_t w = std::min<size_t>(c.size(), 6);
    return chance(0.7) ? c[c.size() - 1 - pick(w)] : c[pick(c.size())];
  }
  ir::Value* of_shape(const Shape& s) {
    ir::Value* v = operand([&](ir::Value* x) { return shape(x) == s; });
    return v && chance(0.85) ? v : new_input(s);
  }
  bool writable(ir::Value* v) const {
    const Info& i = info_.at(v);
    return !i.view && !i.viewed;
  }
  // A value to write (an out or in-place argument) of shape `s`, not in `avoid`.
  ir::Value* target(const Shape& s, std::vector<ir::Value*> avoid = {}) {
    double r = std::uniform_real_distribution<double>(0, 1)(rng_);
    if (r < 0.35) {
      ir::Value* v = operand([&](ir::Value* x) {
        return shape(x) == s && writable(x) &&
               std::find(avoid.begin(), avoid.end(), x) == avoid.end();
      });
      if (v) {
        if (v->is_input()) count("write_graph_input");
        return v;
      }
    }
    if (r < 0.55) {
      count("write_graph_input");
      return new_input(s);
    }
    return fresh(g_->add_op("aten::zeros", {Arg::of_literal(std::vector<int64_t>(s))},
                            {{"dtype", Arg::of_literal(dtype_)}}));
  }

  std::string group() {
    std::string gname = chance(0.6) ? "tp" : "sub";
    if (gname == "sub") count("subgroup");
    return gname;
  }
  int gsize(const std::string& gname) const { return g_->group_size(gname); }
  std::string reduce_op() {
    static const char* kOps[] = {"sum", "avg", "max", "min"};
    return kOps[pick(4)];
  }
  // Notes what kind of value feeds a symm arg.
  void symm_feature(ir::Value* v) {
    if (v->is_input()) count("symm_arg_graph_input");
    if (info_.at(v).view) count("symm_arg_view");
    if (!info_.at(v).contiguous) count("symm_arg_noncontiguous");
  }
  ir::Node* op(const std::string& name, std::vector<Arg> args, std::vector<ir::KwArg> kw = {}) {
    count(name);
    return g_->add_op(name, std::move(args), std::move(kw));
  }
  void view_of(ir::Value* base, ir::Node* n, bool contiguous) {
    info_[base].viewed = true;
    add(n->output(), {contiguous && info_[base].contiguous, true, false});
    if (!info_[n->output()].contiguous) count("noncontiguous_view");
  }

  void step() {
    static const std::vector<std::pair<int, void (Generator::*)()>> kTable = {
        {6, &Generator::unary},        {5, &Generator::binary},
        {4, &Generator::matmul},       {6, &Generator::view},
        {4, &Generator::inplace},      {3, &Generator::all_reduce},
        {3, &Generator::all_reduce_2}, {3, &Generator::scatter_gather},
        {2, &Generator::permute},      {2, &Generator::put_wait},
        {2, &Generator::get},          {1, &Generator::broadcast},
        {1, &Generator::barrier},      {1, &Generator::all_to_all}};
    int total = 0;
    for (const auto& e : kTable) total += e.first;
    int r = int(pick(size_t(total)));
    for (const auto& [w, fn] : kTable) {
      if (r < w) return (this->*fn)();
      r -= w;
    }
  }

  void unary() {
    static const char* kOps[] = {"aten::sin", "aten::cos",     "aten::tanh", "aten::relu",
                                 "aten::neg", "aten::sigmoid", "aten::silu"};
    ir::Value* x = operand();
    if (chance(0.3)) {
      fresh(op(chance(0.5) ? "aten::mul.Scalar" : "aten::add.Scalar",
               {Arg::of(x), Arg::of_literal(chance(0.5) ? 0.5 : 1.25)}));
      return;
    }
    count("pointwise");
    fresh(op(kOps[pick(7)], {Arg::of(x)}));
  }
  void binary() {
    static const char* kOps[] = {"aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor"};
    ir::Value* a = operand();
    ir::Value* b = of_shape(shape(a));
    count("pointwise");
    fresh(op(kOps[pick(3)], {Arg::of(a), Arg::of(b)}));
  }
  void matmul() {
    ir::Value* a = operand();
    ir::Value* b = of_shape({shape(a)[1], chance(0.5) ? shape(a)[0] : dim()});
    fresh(op("aten::mm", {Arg::of(a), Arg::of(b)}));
  }
  void view() {
    ir::Value* x = operand();
    int64_t r = shape(x)[0], c = shape(x)[1];
    switch (pick(5)) {
      case 0:
        return view_of(x, op("aten::t", {Arg::of(x)}), false);
      case 1:
        return view_of(
            x, op("aten::transpose.int", {Arg::of(x), Arg::of_literal(0), Arg::of_literal(1)}),
            false);
      case 2:
      case 3: {
        int64_t d = int64_t(pick(2)), n = d == 0 ? r : c;
        int64_t step = chance(0.4) ? 2 : 1, start = int64_t(pick(size_t(n / 2)));
        int64_t end = std::min(n, start + std::max<int64_t>(2, n / 2) * step);
        ir::Node* s =
            op("aten::slice.Tensor", {Arg::of(x), Arg::of_literal(d), Arg::of_literal(start),
                                      Arg::of_literal(end), Arg::of_literal(step)});
        return view_of(x, s, d == 0 && step == 1);
      }
      default: {
        if (!info_[x].contiguous) return unary();
        std::vector<int64_t> to = {c, r};
        return view_of(
            x, op(chance(0.5) ? "aten::view" : "aten::reshape", {Arg::of(x), Arg::of_literal(to)}),
            true);
      }
    }
  }
  void inplace() {
    ir::Value* t = target(random_shape());
    count("inplace");
    switch (pick(4)) {
      case 0:
        op(chance(0.5) ? "aten::sin_" : "aten::relu_", {Arg::of(t)});
        break;
      case 1:
        op(chance(0.5) ? "aten::add_.Tensor" : "aten::mul_.Tensor",
           {Arg::of(t), Arg::of(of_shape(shape(t)))});
        break;
      case 2: {
        ir::Value* src = operand([&](ir::Value* x) { return x != t && shape(x) == shape(t); });
        op("aten::copy_", {Arg::of(t), Arg::of(src ? src : new_input(shape(t)))});
        break;
      }
      default: {
        ir::Value* x = of_shape(shape(t));
        if (x == t) x = new_input(shape(t));
        op("aten::cos.out", {Arg::of(x)}, {{"out", Arg::of(t)}});
      }
    }
  }
  void all_reduce() {
    std::string gname = group();
    ir::Value* x = operand();
    symm_feature(x);
    switch (pick(4)) {
      case 0:
      case 1:
        fresh(op("symm_mem::one_shot_all_reduce",
                 {Arg::of(x), Arg::of_literal(reduce_op()), Arg::of_literal(gname)}));
        return;
      case 2: {
        ir::Value* out = target(shape(x), {x});
        op("symm_mem::one_shot_all_reduce_out",
           {Arg::of(x), Arg::of_literal(reduce_op()), Arg::of_literal(gname), Arg::of(out)});
        return;
      }
      default: {  // _copy: x is the local input, a buffer of its shape the symm buffer
        ir::Value* buf = target(shape(x), {x});
        if (chance(0.5)) {
          fresh(
              op("symm_mem::one_shot_all_reduce_copy",
                 {Arg::of(buf), Arg::of(x), Arg::of_literal(reduce_op()), Arg::of_literal(gname)}));
        } else {
          ir::Value* out = target(shape(x), {x, buf});
          op("symm_mem::one_shot_all_reduce_copy_out",
             {Arg::of(buf), Arg::of(x), Arg::of_literal(reduce_op()), Arg::of_literal(gname),
              Arg::of(out)});
        }
      }
    }
  }
  void all_reduce_2() {  // two-shot, in place
    std::string gname = group();
    ir::Value* x = target(random_shape());
    symm_feature(x);
    if (chance(0.5)) {
      op("symm_mem::two_shot_all_reduce_",
         {Arg::of(x), Arg::of_literal(reduce_op()), Arg::of_literal(gname)});
    } else {
      ir::Value* out = target(shape(x), {x});
      op("symm_mem::two_shot_all_reduce_out",
         {Arg::of(x), Arg::of_literal(reduce_op()), Arg::of_literal(gname), Arg::of(out)});
    }
  }
  void scatter_gather() {
    std::string gname = group();
    int64_t w = gsize(gname);
    switch (pick(4)) {
      case 0: {
        bool last = chance(0.5);
        ir::Value* x = target({12, 12});
        symm_feature(x);
        Shape s = shape(x);
        s[last ? 1 : 0] /= w;
        ir::Value* out = target(s, {x});
        op("symm_mem::reduce_scatter_out",
           {Arg::of(x), Arg::of_literal(gname), Arg::of_literal(last), Arg::of(out)});
        return;
      }
      case 1: {
        ir::Value* x = operand([&](ir::Value* v) { return shape(v)[0] % w == 0; });
        if (!x) x = new_input({12, dim()});
        symm_feature(x);
        fresh(op("symm_mem::_low_contention_reduce_scatter",
                 {Arg::of(x), Arg::of_literal(reduce_op()), Arg::of_literal(gname)}));
        return;
      }
      case 2: {
        ir::Value* x = operand();
        symm_feature(x);
        ir::Value* out = target({shape(x)[0] * w, shape(x)[1]}, {x});
        op("symm_mem::all_gather_out", {Arg::of(x), Arg::of_literal(gname), Arg::of(out)});
        return;
      }
      default: {
        ir::Value* x = operand();
        symm_feature(x);
        fresh(op("symm_mem::_low_contention_all_gather", {Arg::of(x), Arg::of_literal(gname)}));
      }
    }
  }
  void permute() {
    std::string gname = group();
    ir::Value* x = operand();
    int64_t shift = int64_t(pick(size_t(gsize(gname)) + 1));
    if (chance(0.5)) {
      fresh(op("symm_mem::collective_permute",
               {Arg::of(x), Arg::of_literal(shift), Arg::of_literal(gname)}));
    } else {
      ir::Value* out = target(shape(x), {x});
      symm_feature(out);
      op("symm_mem::collective_permute_out",
         {Arg::of(x), Arg::of_literal(shift), Arg::of_literal(gname), Arg::of(out)});
    }
  }
  // barrier (publishes dst); put_signal to rank + s; wait_signal from rank - s; dst then holds
  // the data of rank - s.
  void put_wait() {
    std::string gname = group();
    int gs = gsize(gname), s = int(pick(size_t(gs)));
    ir::Value* src = operand();
    ir::Value* dst = target(shape(src), {src});
    symm_feature(dst);
    int64_t channel = int64_t(pick(2));
    op("symm_mem::barrier", {Arg::of_literal(gname)});
    op("symm_mem::put_signal",
       {Arg::of(src), Arg::of(dst), Arg::of_rank(s), Arg::of_literal(channel),
        Arg::of_literal(gname)});
    op("symm_mem::wait_signal",
       {Arg::of(dst), Arg::of_rank(-s), Arg::of_literal(channel), Arg::of_literal(gname)});
  }
  // barrier (publishes src); get from rank + s; barrier (src may change again).
  void get() {
    std::string gname = group();
    int gs = gsize(gname), s = int(pick(size_t(gs)));
    ir::Value* src = operand();
    symm_feature(src);
    ir::Value* out = target(shape(src), {src});
    op("symm_mem::barrier", {Arg::of_literal(gname)});
    op("symm_mem::get", {Arg::of(src), Arg::of_rank(s), Arg::of_literal(gname), Arg::of(out)});
    op("symm_mem::barrier", {Arg::of_literal(gname)});
  }
  void broadcast() {
    std::string gname = group();
    ir::Value* x = target(random_shape());
    symm_feature(x);
    op("symm_mem::broadcast_",
       {Arg::of(x), Arg::of_literal(int64_t(pick(size_t(gsize(gname))))), Arg::of_literal(gname)});
  }
  // Every rank sends one row to each rank; the splits are i64 tensors the program makes (not
  // operands of other ops).
  void all_to_all() {
    std::string gname = group();
    int64_t w = gsize(gname);
    ir::Value* x = operand([&](ir::Value* v) { return shape(v)[0] >= w; });
    if (!x) x = new_input(random_shape());
    symm_feature(x);
    ir::Value* out = target(shape(x), {x});
    ir::KwArg i64{"dtype", Arg::of_literal(DType::i64)};
    ir::Node* splits =
        g_->add_op("aten::full",
                   {Arg::of_literal(std::vector<int64_t>{w}), Arg::of_literal(int64_t(1))}, {i64});
    ir::Node* meta =
        g_->add_op("aten::zeros", {Arg::of_literal(std::vector<int64_t>{2, w})}, {i64});
    op("symm_mem::all_to_all_vdev", {Arg::of(x), Arg::of(out), Arg::of(splits->output()),
                                     Arg::of(meta->output()), Arg::of_literal(gname)});
  }
  void barrier() { op("symm_mem::barrier", {Arg::of_literal(group())}); }

  ProgramOptions o_;
  std::mt19937_64 rng_;
  DType dtype_ = DType::f32;
  std::unique_ptr<ir::Graph> g_;
  std::vector<ir::Value*> vals_;
  std::unordered_map<ir::Value*, Info> info_;
  std::map<std::string, int> features_;
};

}  // namespace

Program random_program(const ProgramOptions& options) {
  return Generator(options).run();
}

}  // namespace symmflow::e2e
