// plan_memory: buffer assignment for a scheduled graph, in XLA's layers (DESIGN "Memory").
//
// Expects: a graph whose node order is the execution order (schedule has run) and whose values
//   carry layouts (realize_symm_mem); a non-input value left unassigned is treated as regular, so
//   hand-written graphs plan too.
// Guarantees:
//   - aliases: an op return that aliases an argument (views, in-place results) shares its base's
//     buffer (BufferPlan::pool == -1, alias_of = the base buffer that owns memory); the base lives
//     as long as any of its aliases. Views of graph inputs have no buffer (caller memory).
//   - live ranges over the schedule: a buffer lives from the step that defines it to the last step
//     that reads or writes it (or any alias of it); graph outputs and writeback values live to
//     steps.size(); a copy-in of a graph input (attrs["copy"] == "input") lives for the whole run
//     (from step 0 to steps.size()), so a caller may write its input into that staging buffer
//     before the run and finds it unchanged after (zero-copy binding: the staging buffer is the
//     caller's input tensor, which no other buffer may reuse);
//     a symm buffer that peers write (a written symm arg of a communicating op) lives for the whole
//     run (Note [peer-written buffers]); the src of symm_mem::get, which peers read without a
//     closing barrier, lives until the group's next synchronising op (Note [unsynchronised peer
//     reads]).
//   - per colour (regular, symm[g] per group), sizes rounded up to 64 bytes; buffers live at every
//     step are stacked at the bottom (Note [always-live buffers]), the others best-fit packed in
//     several orders — "start" (sweep in schedule order, ties by size desc), "size" (global
//     decreasing-size best-fit over the buffers live at the same time), "end" (the sweep run
//     backwards in time) — the smallest peak kept (ties: the first). Each order is O(n log n);
//     "size" gives up (recorded in PoolPlan::tried with peak 0) once the overlapping pairs it has
//     looked at exceed a budget linear in n, so the pass stays O(n log n) on any graph.
//   - PoolPlan {name, layout, bytes = peak, lower_bound = the most (aligned) bytes live at one
//     step}; no two buffers of a pool live at a common step overlap in [offset, offset + bytes);
//     the alloc/free events of the kept packing are recorded in MemoryPlan::events.
//   - pools are ordered regular first, then symm pools in order of first definition (every rank
//     allocates the heaps in this order).
// Refuses: a value placed in symm[g] for an undeclared group g (InvalidUsage naming the value).
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>

#include <fmt/format.h>

#include "symmflow/passes/plan_memory.hpp"

namespace symmflow::passes {

namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

struct Item {
  size_t bytes;    // aligned
  int start, end;  // inclusive steps
};

struct Packing {
  std::vector<size_t> offsets;
  size_t peak = 0;
};

// Sweep in start order: frees buffers whose range ended, then takes the smallest free gap that
// fits (best fit), else grows the top. Free gaps coalesce; a gap reaching the top lowers it.
Packing sweep_best_fit(const std::vector<Item>& items) {
  std::vector<int> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Item &x = items[size_t(a)], &y = items[size_t(b)];
    if (x.start != y.start) return x.start < y.start;
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    return a < b;
  });
  Packing p;
  p.offsets.assign(items.size(), 0);
  std::map<size_t, size_t> gaps;             // offset -> size
  std::set<std::pair<size_t, size_t>> fits;  // (size, offset)
  size_t top = 0;
  using Live = std::pair<int, int>;  // (end, item)
  std::priority_queue<Live, std::vector<Live>, std::greater<>> live;
  auto add_gap = [&](size_t off, size_t size) {
    auto next = gaps.lower_bound(off);
    if (next != gaps.end() && next->first == off + size) {  // merge with the gap above
      size += next->second;
      fits.erase({next->second, next->first});
      next = gaps.erase(next);
    }
    if (next != gaps.begin()) {  // merge with the gap below
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        off = prev->first;
        size += prev->second;
        fits.erase({prev->second, prev->first});
        gaps.erase(prev);
      }
    }
    if (off + size == top) {
      top = off;
      return;
    }
    gaps[off] = size;
    fits.insert({size, off});
  };
  for (int i : order) {
    const Item& it = items[size_t(i)];
    while (!live.empty() && live.top().first < it.start) {
      int j = live.top().second;
      live.pop();
      add_gap(p.offsets[size_t(j)], items[size_t(j)].bytes);
    }
    if (it.bytes == 0) continue;
    auto best = fits.lower_bound({it.bytes, 0});
    if (best != fits.end()) {
      auto [size, off] = *best;
      fits.erase(best);
      gaps.erase(off);
      p.offsets[size_t(i)] = off;
      if (size > it.bytes) {
        gaps[off + it.bytes] = size - it.bytes;
        fits.insert({size - it.bytes, off + it.bytes});
      }
    } else {
      p.offsets[size_t(i)] = top;
      top += it.bytes;
      p.peak = std::max(p.peak, top);
    }
    live.push({it.end, i});
  }
  return p;
}

// Global decreasing-size best fit: each buffer, largest first, takes the smallest gap left by the
// already placed buffers whose ranges overlap its own. Overlap queries use a max-end segment tree
// over the buffers sorted by start. Gives up (nullopt) past `budget` overlapping pairs visited.
std::optional<Packing> size_best_fit(const std::vector<Item>& items, size_t budget) {
  size_t n = items.size();
  std::vector<int> by_start(n);
  std::iota(by_start.begin(), by_start.end(), 0);
  std::sort(by_start.begin(), by_start.end(), [&](int a, int b) {
    return items[size_t(a)].start != items[size_t(b)].start
               ? items[size_t(a)].start < items[size_t(b)].start
               : a < b;
  });
  std::vector<size_t> rank_of(n);
  for (size_t r = 0; r < n; ++r) rank_of[size_t(by_start[r])] = r;
  size_t leaves = 1;
  while (leaves < std::max<size_t>(n, 1)) leaves *= 2;
  std::vector<int> max_end(2 * leaves, -1);  // over placed buffers only
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const Item &x = items[size_t(a)], &y = items[size_t(b)];
    if (x.bytes != y.bytes) return x.bytes > y.bytes;
    if (x.start != y.start) return x.start < y.start;
    return a < b;
  });
  Packing p;
  p.offsets.assign(n, 0);
  size_t visited = 0;
  std::vector<std::pair<size_t, size_t>> overlap;  // (offset, bytes)
  for (int i : order) {
    const Item& it = items[size_t(i)];
    if (it.bytes == 0) continue;
    // Placed buffers with start <= it.end (a prefix of by_start) and end >= it.start.
    size_t hi =
        size_t(std::upper_bound(by_start.begin(), by_start.end(), it.end,
                                [&](int end, int b) { return end < items[size_t(b)].start; }) -
               by_start.begin());
    overlap.clear();
    std::vector<std::pair<size_t, std::pair<size_t, size_t>>> stack{{1, {0, leaves}}};
    while (!stack.empty()) {
      auto [node, range] = stack.back();
      stack.pop_back();
      if (range.first >= hi || max_end[node] < it.start) continue;
      if (node >= leaves) {
        int j = by_start[node - leaves];
        overlap.push_back({p.offsets[size_t(j)], items[size_t(j)].bytes});
        continue;
      }
      size_t mid = (range.first + range.second) / 2;
      stack.push_back({2 * node + 1, {mid, range.second}});
      stack.push_back({2 * node, {range.first, mid}});
    }
    visited += overlap.size();
    if (visited > budget) return std::nullopt;
    std::sort(overlap.begin(), overlap.end());
    size_t cursor = 0, best = SIZE_MAX, best_size = SIZE_MAX;
    for (auto [off, size] : overlap) {
      if (off > cursor && off - cursor >= it.bytes && off - cursor < best_size) {
        best = cursor;
        best_size = off - cursor;
      }
      cursor = std::max(cursor, off + size);
    }
    size_t off = best != SIZE_MAX ? best : cursor;
    p.offsets[size_t(i)] = off;
    p.peak = std::max(p.peak, off + it.bytes);
    for (size_t node = leaves + rank_of[size_t(i)]; node >= 1; node /= 2)
      max_end[node] = std::max(max_end[node], it.end);
  }
  return p;
}

size_t lower_bound_of(const std::vector<Item>& items, int steps) {
  std::vector<int64_t> delta(size_t(steps) + 2, 0);
  for (const Item& it : items) {
    delta[size_t(it.start)] += int64_t(it.bytes);
    delta[size_t(it.end) + 1] -= int64_t(it.bytes);
  }
  int64_t live = 0, most = 0;
  for (int64_t d : delta) most = std::max(most, live += d);
  return size_t(most);
}

struct Colour {
  ir::Layout layout;
  std::vector<int> buffers;
};

}  // namespace

MemoryPlan plan_memory(const ir::Graph& graph) {
  MemoryPlan plan;
  const auto& nodes = graph.nodes();
  const int end_step = int(nodes.size());
  std::vector<Colour> colours;  // [0] regular
  colours.push_back({ir::Layout::regular(), {}});
  std::map<std::string, int> symm_colour;
  std::vector<int> colour_of;  // per buffer; -1 for aliases

  auto root = [&](int b) {  // aliases point at the base that owns memory
    while (plan.buffers[size_t(b)].alias_of >= 0) b = plan.buffers[size_t(b)].alias_of;
    return b;
  };
  auto add_buffer = [&](const ir::Value* v, int step, int alias_of) {
    BufferPlan b;
    b.name = v->name();
    b.type = v->type();
    b.bytes = v->type().bytes();
    b.first_step = step;
    b.last_step = step;
    int index = int(plan.buffers.size());
    if (alias_of >= 0) {
      b.alias_of = root(alias_of);
      colour_of.push_back(-1);
    } else {
      int c = 0;
      if (v->layout().pool == ir::Pool::symm) {
        const std::string& g = v->layout().group;
        SF_CHECK(graph.find_group(g),
                 "plan_memory: value '{}' is placed in symm[{}] but group '{}' is not declared",
                 v->name(), g, g);
        auto [it, fresh] = symm_colour.try_emplace(g, int(colours.size()));
        if (fresh) colours.push_back({v->layout(), {}});
        c = it->second;
      }
      colours[size_t(c)].buffers.push_back(index);
      colour_of.push_back(c);
    }
    plan.buffers.push_back(std::move(b));
    plan.buffer_of[v] = index;
  };

  // Aliases: one buffer per value that has memory.
  for (int step = 0; step < end_step; ++step) {
    const ir::Node* n = nodes[size_t(step)];
    for (size_t r = 0; r < n->outputs().size(); ++r) {
      const ir::Value* v = n->output(r);
      int alias_arg = -1;
      if (n->kind() == ir::NodeKind::op) {
        const auto& ra = n->op()->aliases().returns_alias;
        if (r < ra.size()) alias_arg = ra[r];
      }
      if (alias_arg < 0) {
        add_buffer(v, step, -1);
        continue;
      }
      const ir::Arg& a = n->args().at(size_t(alias_arg));
      if (a.kind != ir::Arg::Kind::value) {
        add_buffer(v, step, -1);
        continue;
      }
      auto base = plan.buffer_of.find(a.value);
      if (base == plan.buffer_of.end()) continue;  // a view of caller memory
      add_buffer(v, step, base->second);
    }
    if (n->kind() == ir::NodeKind::copy) {
      auto it = n->attrs().find("copy");
      if (it != n->attrs().end() && it->second == "input") {
        BufferPlan& staging = plan.buffers[size_t(plan.buffer_of.at(n->output()))];
        staging.first_step = 0;
        staging.last_step = end_step;
      }
    }
  }

  // Live ranges over the schedule.
  auto extend = [&](const ir::Value* v, int step) {
    auto it = plan.buffer_of.find(v);
    if (it == plan.buffer_of.end()) return;
    BufferPlan& b = plan.buffers[size_t(it->second)];
    b.last_step = std::max(b.last_step, step);
    BufferPlan& base = plan.buffers[size_t(root(it->second))];
    base.last_step = std::max(base.last_step, step);
  };
  for (auto& [v, b] : plan.buffer_of) {
    for (const ir::Node* user : v->uses()) extend(v, int(graph.position(user)));
  }
  for (const ir::Value* v : graph.outputs()) {
    extend(v, end_step);
    if (auto it = plan.buffer_of.find(v); it != plan.buffer_of.end())
      plan.buffers[size_t(it->second)].intermediate = false;
  }
  for (const auto& w : graph.writebacks()) extend(w.value, end_step);
  // Note [peer-written buffers]: a symm arg that an op writes (put_signal's dst, all_to_all's out)
  // is stored to by peers, which may run ahead of this rank by any number of steps (and into the
  // next run); such a buffer owns its bytes for the whole run.
  for (int step = 0; step < end_step; ++step) {
    const ir::Node* n = nodes[size_t(step)];
    if (n->kind() != ir::NodeKind::op && n->kind() != ir::NodeKind::functional) continue;
    const OpDef& op = *n->op();
    const auto& written = op.aliases().written_args;
    size_t new_value = op.schema().returns.size();  // functional: new values follow the returns
    for (int w : written) {
      const std::string& name = op.schema().args[size_t(w)].name;
      bool symm =
          std::find(op.symm_args().begin(), op.symm_args().end(), name) != op.symm_args().end();
      std::vector<const ir::Value*> targets;
      if (n->kind() == ir::NodeKind::functional) {
        targets.push_back(n->output(new_value++));
      } else {
        const ir::Arg& a = n->args()[size_t(w)];
        if (a.kind == ir::Arg::Kind::value) targets.push_back(a.value);
        targets.insert(targets.end(), a.values.begin(), a.values.end());
      }
      if (!symm || n->group().empty()) continue;
      for (const ir::Value* v : targets) {
        auto it = plan.buffer_of.find(v);
        if (it == plan.buffer_of.end()) continue;
        BufferPlan& base = plan.buffers[size_t(root(it->second))];
        base.first_step = 0;
        base.last_step = end_step;
      }
    }
  }

  // Note [unsynchronised peer reads]: peers read `get`'s src with no barrier closing the op, so
  // that buffer stays live until the next communication of its group that synchronises every
  // rank (any op of the group not tagged one_sided), or to the end. Ops tagged peer_read (get).
  auto unsynchronised = [](const ir::Node* n) { return n->op()->has(Tag::one_sided); };
  for (int step = 0; step < end_step; ++step) {
    const ir::Node* n = nodes[size_t(step)];
    if (!n->op() || !n->op()->has(Tag::peer_read) || n->group().empty()) continue;
    int until = step + 1;
    for (; until < end_step; ++until) {
      const ir::Node* m = nodes[size_t(until)];
      if (m->op() && m->group() == n->group() && !unsynchronised(m)) break;
    }
    extend(n->args()[0].value, until);
  }

  // Packing per colour. Note [always-live buffers]: buffers live at every step (peer-written
  // ones, outputs that are copy-ins, ...) overlap everything, so they are stacked at the bottom of
  // the pool, in buffer order, and only the others are packed above them. Any packing pays their
  // sum at every step, so this loses nothing, and the orders no longer see O(n) overlaps per
  // buffer (which made "size" give up on graphs with many of them).
  for (const Colour& c : colours) {
    if (c.buffers.empty()) continue;
    std::vector<Item> all, items;
    std::vector<size_t> pinned_offset(c.buffers.size(), SIZE_MAX);
    size_t base = 0;
    for (size_t k = 0; k < c.buffers.size(); ++k) {
      const BufferPlan& bp = plan.buffers[size_t(c.buffers[k])];
      all.push_back({align_up(bp.bytes), bp.first_step, bp.last_step});
      if (bp.first_step == 0 && bp.last_step >= end_step) {
        pinned_offset[k] = base;
        base += all.back().bytes;
      } else {
        items.push_back(all.back());
      }
    }
    PoolPlan pool;
    pool.layout = c.layout;
    pool.name = c.layout.str();
    pool.lower_bound = lower_bound_of(all, end_step);
    std::vector<std::pair<std::string, std::optional<Packing>>> tried;
    tried.push_back({"start", sweep_best_fit(items)});
    size_t n = items.size();
    size_t log_n = 1;
    while ((size_t(1) << log_n) < n) ++log_n;
    tried.push_back({"size", size_best_fit(items, 16 * n * log_n + 4096)});  // nullopt: gave up
    std::vector<Item> mirrored = items;
    for (Item& it : mirrored) it = {it.bytes, end_step - it.end, end_step - it.start};
    tried.push_back({"end", sweep_best_fit(mirrored)});
    size_t best = 0;
    for (size_t i = 0; i < tried.size(); ++i) {
      pool.tried.push_back({tried[i].first, tried[i].second ? base + tried[i].second->peak : 0});
      if (tried[i].second && tried[i].second->peak < tried[best].second->peak) best = i;
    }
    pool.order = tried[best].first;
    pool.bytes = base + tried[best].second->peak;
    int pool_index = int(plan.pools.size());
    for (size_t k = 0, packed = 0; k < c.buffers.size(); ++k) {
      BufferPlan& bp = plan.buffers[size_t(c.buffers[k])];
      bp.pool = pool_index;
      bp.offset = pinned_offset[k] != SIZE_MAX ? pinned_offset[k]
                                               : base + tried[best].second->offsets[packed++];
    }
    plan.pools.push_back(std::move(pool));
  }

  // The alloc/free events of the kept packing: at each step, frees (of buffers whose range ended
  // at the step before) come before allocations.
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const BufferPlan& bp = plan.buffers[b];
    if (bp.pool < 0) continue;
    plan.events.push_back(
        {bp.first_step, HeapEvent::Kind::alloc, int(b), bp.pool, bp.offset, bp.bytes});
    plan.events.push_back(
        {bp.last_step + 1, HeapEvent::Kind::free, int(b), bp.pool, bp.offset, bp.bytes});
  }
  std::stable_sort(plan.events.begin(), plan.events.end(),
                   [](const HeapEvent& a, const HeapEvent& b) {
                     if (a.step != b.step) return a.step < b.step;
                     return a.kind == HeapEvent::Kind::free && b.kind == HeapEvent::Kind::alloc;
                   });
  return plan;
}

}  // namespace symmflow::passes
