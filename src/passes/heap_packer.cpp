// The heap packer: best-fit packing of one pool's intervals in several orders, the smallest kept.
// The contract (expects, guarantees, refuses) is in include/symmflow/passes/heap_packer.hpp.
#include "symmflow/passes/heap_packer.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>

#include "symmflow/core/error.hpp"

namespace symmflow::passes {

namespace {

size_t align_up(size_t n, size_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

struct Item {
  size_t bytes;      // footprint: rounded up to the alignment
  size_t alignment;  // a power of two
  int start, end;    // inclusive steps
};

struct Packing {
  std::vector<size_t> offsets;
  size_t peak = 0;
};

// Sweep in start order: frees items whose range ended, then takes the smallest free gap that
// fits (best fit; with alignment padding counted), else grows the top. Free gaps coalesce; a gap
// reaching the top lowers it.
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
  auto insert_gap = [&](size_t off, size_t size) {  // a gap whose neighbours are taken
    gaps[off] = size;
    fits.insert({size, off});
  };
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
    insert_gap(off, size);
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
    while (best != fits.end() && align_up(best->second, it.alignment) - best->second + it.bytes >
                                     best->first)
      ++best;  // too small once the offset is aligned
    if (best != fits.end()) {
      auto [size, off] = *best;
      fits.erase(best);
      gaps.erase(off);
      size_t at = align_up(off, it.alignment);
      p.offsets[size_t(i)] = at;
      if (at > off) insert_gap(off, at - off);
      if (off + size > at + it.bytes) insert_gap(at + it.bytes, off + size - at - it.bytes);
    } else {
      size_t at = align_up(top, it.alignment);
      if (at > top) insert_gap(top, at - top);
      p.offsets[size_t(i)] = at;
      top = at + it.bytes;
      p.peak = std::max(p.peak, top);
    }
    live.push({it.end, i});
  }
  return p;
}

// The items that overlap [start, end] in time among those placed so far, by a max-end segment
// tree over the items sorted by start.
class PlacedIndex {
 public:
  explicit PlacedIndex(const std::vector<Item>& items) : items_(items), by_start_(items.size()) {
    std::iota(by_start_.begin(), by_start_.end(), 0);
    std::sort(by_start_.begin(), by_start_.end(), [&](int a, int b) {
      return items[size_t(a)].start != items[size_t(b)].start
                 ? items[size_t(a)].start < items[size_t(b)].start
                 : a < b;
    });
    rank_of_.resize(items.size());
    for (size_t r = 0; r < items.size(); ++r) rank_of_[size_t(by_start_[r])] = r;
    while (leaves_ < std::max<size_t>(items.size(), 1)) leaves_ *= 2;
    max_end_.assign(2 * leaves_, -1);
  }

  void place(int i) {
    for (size_t node = leaves_ + rank_of_[size_t(i)]; node >= 1; node /= 2)
      max_end_[node] = std::max(max_end_[node], items_[size_t(i)].end);
  }

  // Placed items with start <= item.end (a prefix of by_start_) and end >= item.start.
  void overlapping(const Item& item, std::vector<int>& out) const {
    out.clear();
    auto starts_after = [&](int end, int b) { return end < items_[size_t(b)].start; };
    auto last = std::upper_bound(by_start_.begin(), by_start_.end(), item.end, starts_after);
    size_t hi = size_t(last - by_start_.begin());
    std::vector<std::pair<size_t, std::pair<size_t, size_t>>> stack{{1, {0, leaves_}}};
    while (!stack.empty()) {
      auto [node, range] = stack.back();
      stack.pop_back();
      if (range.first >= hi || max_end_[node] < item.start) continue;
      if (node >= leaves_) {
        out.push_back(by_start_[node - leaves_]);
        continue;
      }
      size_t mid = (range.first + range.second) / 2;
      stack.push_back({2 * node + 1, {mid, range.second}});
      stack.push_back({2 * node, {range.first, mid}});
    }
  }

 private:
  const std::vector<Item>& items_;
  std::vector<int> by_start_;
  std::vector<size_t> rank_of_;
  size_t leaves_ = 1;
  std::vector<int> max_end_;  // over placed items only
};

// Global decreasing-size best fit: each item, largest first, takes the smallest gap left by the
// already placed items whose ranges overlap its own. Gives up (nullopt) past `budget`
// overlapping pairs visited.
std::optional<Packing> size_best_fit(const std::vector<Item>& items, size_t budget) {
  size_t n = items.size();
  PlacedIndex placed(items);
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
  std::vector<int> others;
  std::vector<std::pair<size_t, size_t>> overlap;  // (offset, bytes)
  for (int i : order) {
    const Item& it = items[size_t(i)];
    if (it.bytes == 0) continue;
    placed.overlapping(it, others);
    overlap.clear();
    for (int j : others) overlap.push_back({p.offsets[size_t(j)], items[size_t(j)].bytes});
    visited += overlap.size();
    if (visited > budget) return std::nullopt;
    std::sort(overlap.begin(), overlap.end());
    size_t cursor = 0, best = SIZE_MAX, best_size = SIZE_MAX;
    for (auto [off, size] : overlap) {
      size_t at = align_up(cursor, it.alignment);
      if (off >= at + it.bytes && off - cursor < best_size) {
        best = at;
        best_size = off - cursor;
      }
      cursor = std::max(cursor, off + size);
    }
    size_t off = best != SIZE_MAX ? best : align_up(cursor, it.alignment);
    p.offsets[size_t(i)] = off;
    p.peak = std::max(p.peak, off + it.bytes);
    placed.place(i);
  }
  return p;
}

size_t lower_bound_of(const std::vector<Item>& items, int horizon) {
  std::vector<int64_t> delta(size_t(horizon) + 2, 0);
  for (const Item& it : items) {
    delta[size_t(it.start)] += int64_t(it.bytes);
    delta[size_t(it.end) + 1] -= int64_t(it.bytes);
  }
  int64_t live = 0, most = 0;
  for (int64_t d : delta) most = std::max(most, live += d);
  return size_t(most);
}

void check_interval(const HeapInterval& in, int horizon) {
  SF_CHECK(in.alignment > 0 && (in.alignment & (in.alignment - 1)) == 0,
           "heap packer: interval {} has alignment {}, not a power of two", in.id, in.alignment);
  SF_CHECK(0 <= in.start && in.start <= in.end && in.end <= horizon,
           "heap packer: interval {} lives over steps [{}, {}], outside [0, {}] or backwards",
           in.id, in.start, in.end, horizon);
}

std::vector<HeapPackEvent> events_of(const std::vector<HeapInterval>& intervals,
                                     const std::vector<size_t>& offsets) {
  std::vector<HeapPackEvent> events;
  for (size_t i = 0; i < intervals.size(); ++i) {
    const HeapInterval& in = intervals[i];
    events.push_back({in.start, HeapPackEvent::Kind::alloc, in.id, offsets[i], in.bytes});
    events.push_back({in.end + 1, HeapPackEvent::Kind::free, in.id, offsets[i], in.bytes});
  }
  auto before = [](const HeapPackEvent& a, const HeapPackEvent& b) {
    if (a.step != b.step) return a.step < b.step;
    if (a.kind != b.kind) return a.kind == HeapPackEvent::Kind::free;
    return a.id < b.id;
  };
  std::stable_sort(events.begin(), events.end(), before);
  return events;
}

}  // namespace

HeapPacking pack_heap(const std::vector<HeapInterval>& intervals, int horizon) {
  // Note [always-live buffers] (heap_packer.hpp): those are stacked at the bottom, in input order.
  std::vector<Item> all, items;
  std::vector<size_t> pinned_offset(intervals.size(), SIZE_MAX);
  size_t base = 0, packed_alignment = 1;
  for (size_t k = 0; k < intervals.size(); ++k) {
    const HeapInterval& in = intervals[k];
    check_interval(in, horizon);
    all.push_back({align_up(in.bytes, in.alignment), in.alignment, in.start, in.end});
    if (in.start == 0 && in.end >= horizon) {
      pinned_offset[k] = align_up(base, in.alignment);
      base = pinned_offset[k] + all.back().bytes;
    } else {
      items.push_back(all.back());
      packed_alignment = std::max(packed_alignment, in.alignment);
    }
  }
  base = align_up(base, packed_alignment);  // offsets above it keep their alignment
  HeapPacking out;
  out.lower_bound = lower_bound_of(all, horizon);
  std::vector<std::pair<std::string, std::optional<Packing>>> tried;
  tried.push_back({"start", sweep_best_fit(items)});
  size_t n = items.size();
  size_t log_n = 1;
  while ((size_t(1) << log_n) < n) ++log_n;
  tried.push_back({"size", size_best_fit(items, 16 * n * log_n + 4096)});  // nullopt: gave up
  std::vector<Item> mirrored = items;
  for (Item& it : mirrored) it = {it.bytes, it.alignment, horizon - it.end, horizon - it.start};
  tried.push_back({"end", sweep_best_fit(mirrored)});
  size_t best = 0;
  for (size_t i = 0; i < tried.size(); ++i) {
    out.tried.push_back({tried[i].first, tried[i].second ? base + tried[i].second->peak : 0});
    if (tried[i].second && tried[i].second->peak < tried[best].second->peak) best = i;
  }
  const Packing& kept = *tried[best].second;
  out.order = tried[best].first;
  out.size = base + kept.peak;
  out.offsets.resize(intervals.size());
  for (size_t k = 0, packed = 0; k < intervals.size(); ++k) {
    bool pinned = pinned_offset[k] != SIZE_MAX;
    out.offsets[k] = pinned ? pinned_offset[k] : base + kept.offsets[packed++];
  }
  out.events = events_of(intervals, out.offsets);
  return out;
}

}  // namespace symmflow::passes
