// The `mpi` transport's Bootstrap (contract in mpi_bootstrap.hpp).
//
// Note [freeing shared memory] (mpi): MPI_Win_free is collective over the window's communicator,
// so a SharedRegion dropped on one rank at an arbitrary moment cannot free its window: its peers
// may still store into it (a late put_signal), or never call MPI_Win_free at that point, and the
// free would hang. So a region's destructor frees nothing; every window lives until teardown(),
// which runs when MPI is finalized (init_mpi attaches it to MPI_COMM_SELF, whose attributes MPI
// deletes first thing in MPI_Finalize, with MPI still fully usable). teardown() first proves with
// a bounded barrier that every rank reached it, then every rank frees its windows in creation
// order: they were created collectively in that order, so freeing them in that order cannot
// deadlock. If some rank does not arrive in time (it died), nothing is freed and the MPI library
// reclaims the memory. Consequence: memory of dropped heaps comes back only at finalize, so
// allocate long-lived heaps (the compiler's one heap per group) rather than one per temporary.
//
// Note [control block]: one per host, in a shared window owned by the host's first rank:
//   [0, 4)     uint32 state: 0 no failure, 1 being written, 2 published
//   [4, 8)     int32 failed world rank
//   [8, 1024)  message, NUL-terminated
//   [1024, ..) uint64 progress word per rank of the host (Note [naming the missing rank])
// poison() claims the state 0 -> 1, writes rank and message, then publishes 2 (release);
// failure() reads 2 (acquire) before the rest. The first failure wins, as on threads.
//
// Note [naming the missing rank]: an MPI collective does not say who has not arrived. Each rank
// stores a tag of the last exchange it entered (member set, sequence number in that set) in its
// progress word; a waiting rank names the first member of its host that is idle or behind in the
// same member set, else the first one busy in another member set (a member that timed out and
// moved on may show up there: the name is best effort). Members on other hosts are not visible, so
// a timeout waiting only for them says "waiting for peers".
//
// Note [mpi shared memory room]: MPI_Win_allocate_shared puts a host's window in one segment in
// /dev/shm (Open MPI's shmem mmap component, MPICH's shm), created by one rank and attached by
// the others. On a /dev/shm too small for it, the creating rank failed with MPI_ERR_INTERN while
// its peers waited inside the collective call, and then past MPI_Finalize (seen on a 64 MiB
// tmpfs). So the members first exchange what their /dev/shm has free with the sizes they ask
// for, and when the segment cannot fit every member raises the same System error, before MPI is
// asked, naming each short rank's need and free bytes as the store transport does.
#include "mpi_bootstrap.hpp"

#include <unistd.h>

#include "runtime/futex.hpp"
#include "runtime/store/host_memory.hpp"
#include "runtime/rendezvous.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mpi_check.hpp"
#include "symmflow/core/error.hpp"
#include "symmflow/runtime/tunables.hpp"
#include "symmflow/runtime/wait.hpp"

namespace symmflow {

namespace detail {

void mpi_call_failed(int rc, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    std::snprintf(text, sizeof text, "code %d", rc);
  throw_error(ErrorCode::Mpi, "{} failed: {} ({}:{})", call, text, file, line);
}

}  // namespace detail

namespace {

constexpr size_t kControlHeader = 1024;
constexpr size_t kWhatOffset = 8;
constexpr int kRendezvousTag = 7001;
constexpr int kCreateTag = 7002;
constexpr double kTeardownMinS = 10.0;

std::atomic<uint32_t>* state_of(char* control) {
  return reinterpret_cast<std::atomic<uint32_t>*>(control);
}
std::atomic<int32_t>* rank_of(char* control) {
  return reinterpret_cast<std::atomic<int32_t>*>(control + 4);
}
std::atomic<uint64_t>* progress_of(char* control, int index) {
  return reinterpret_cast<std::atomic<uint64_t>*>(control + kControlHeader) + index;
}

// Progress word (Note [naming the missing rank]): high half a hash of the member set (never 0),
// low half the exchange's sequence number in that set.
uint64_t progress_tag(const std::vector<int>& members, uint64_t seq) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  for (int m : members) mix(uint64_t(uint32_t(m)));
  mix(members.size());
  return (uint64_t(uint32_t(h >> 32) | 1u) << 32) | uint32_t(seq);
}

class MpiRegion : public SharedRegion {
 public:
  MpiRegion(std::vector<void*> blocks, size_t mine, size_t bytes)
      : blocks_(std::move(blocks)), mine_(mine), bytes_(bytes) {}
  // Frees nothing: Note [freeing shared memory].
  void* local() const override { return blocks_[mine_]; }
  void* peer(int i) const override { return blocks_.at(size_t(i)); }
  size_t bytes() const override { return bytes_; }

 private:
  std::vector<void*> blocks_;
  size_t mine_;
  size_t bytes_;
};

struct ExchangeBuffers {
  long long length = 0;
  std::vector<long long> lengths;
  std::string send, recv;
  std::vector<int> counts, displs;
};

}  // namespace

MpiBootstrap::MpiBootstrap() {
  SF_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  SF_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  SF_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world_));
  SF_MPI_CHECK(MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN));
  SF_MPI_CHECK(MPI_Comm_dup(world_, &p2p_));
  SF_MPI_CHECK(MPI_Comm_set_errhandler(p2p_, MPI_ERRORS_RETURN));
  // Note [hosts]: a simulated host (SYMMFLOW_HOST_ID) is a node of its own: no shared window and
  // no control block spans two ids.
  const std::optional<int> simulated = simulated_host_id();
  if (simulated)
    SF_MPI_CHECK(MPI_Comm_split(world_, *simulated, rank_, &node_));
  else
    SF_MPI_CHECK(MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_));
  SF_MPI_CHECK(MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN));

  // Hosts: name and id (lowest world rank of the host) of every rank.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int name_len = 0;
  SF_MPI_CHECK(MPI_Get_processor_name(name, &name_len));
  if (simulated)
    fmt::format_to_n(name, MPI_MAX_PROCESSOR_NAME - 1, "host {} (SYMMFLOW_HOST_ID)", *simulated);
  std::vector<char> names(size_t(size_) * MPI_MAX_PROCESSOR_NAME);
  SF_MPI_CHECK(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(),
                             MPI_MAX_PROCESSOR_NAME, MPI_CHAR, world_));
  int node_rank = 0, node_size = 0;
  SF_MPI_CHECK(MPI_Comm_rank(node_, &node_rank));
  SF_MPI_CHECK(MPI_Comm_size(node_, &node_size));
  local_ranks_ = node_size;
  std::vector<uint64_t> mask = cpu_mask();
  SF_MPI_CHECK(
      MPI_Allreduce(MPI_IN_PLACE, mask.data(), int(mask.size()), MPI_UINT64_T, MPI_BOR, node_));
  local_cpus_ = cpu_count(mask);
  int leader = rank_;
  SF_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node_));
  host_id_.resize(size_t(size_));
  SF_MPI_CHECK(MPI_Allgather(&leader, 1, MPI_INT, host_id_.data(), 1, MPI_INT, world_));
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(&names[size_t(r) * MPI_MAX_PROCESSOR_NAME]);
  std::vector<std::string> leaders;
  for (int h : host_id_) leaders.push_back(std::to_string(h));
  host_number_ = number_hosts(leaders);
  std::vector<int> node_members(static_cast<size_t>(node_size));
  SF_MPI_CHECK(MPI_Allgather(&rank_, 1, MPI_INT, node_members.data(), 1, MPI_INT, node_));
  node_index_.assign(size_t(size_), -1);
  for (int i = 0; i < node_size; ++i) node_index_[size_t(node_members[size_t(i)])] = i;

  // The control block (Note [control block]), owned by the host's first rank.
  MPI_Aint control_bytes = node_rank == 0 ? MPI_Aint(kControlHeader + 8 * size_t(node_size)) : 0;
  void* base = nullptr;
  SF_MPI_CHECK(
      MPI_Win_allocate_shared(control_bytes, 1, MPI_INFO_NULL, node_, &base, &control_win_));
  SF_MPI_CHECK(MPI_Win_set_errhandler(control_win_, MPI_ERRORS_RETURN));
  MPI_Aint size = 0;
  int disp = 0;
  SF_MPI_CHECK(MPI_Win_shared_query(control_win_, 0, &size, &disp, &base));
  SF_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, control_win_));
  if (node_rank == 0) std::memset(base, 0, size_t(control_bytes));
  SF_MPI_CHECK(MPI_Win_sync(control_win_));
  SF_MPI_CHECK(MPI_Barrier(node_));
  SF_MPI_CHECK(MPI_Win_sync(control_win_));
  control_ = static_cast<char*>(base);

  std::vector<int> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) all[size_t(r)] = r;
  comms_[all].comm = world_;
}

MpiBootstrap::~MpiBootstrap() {
  teardown();
}

double MpiBootstrap::timeout_s() const {
  return tunables().timeout_s;
}

void MpiBootstrap::poison(const std::string& why) {
  if (!control_) return;
  uint32_t expected = 0;
  if (!state_of(control_)->compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;
  rank_of(control_)->store(rank_, std::memory_order_relaxed);
  size_t n = std::min(why.size(), kControlHeader - kWhatOffset - 1);
  std::memcpy(control_ + kWhatOffset, why.data(), n);
  control_[kWhatOffset + n] = '\0';
  state_of(control_)->store(2, std::memory_order_release);
}

std::optional<RankFailure> MpiBootstrap::failure() const {
  if (!control_ || state_of(control_)->load(std::memory_order_acquire) != 2) return std::nullopt;
  return RankFailure{rank_of(control_)->load(std::memory_order_relaxed),
                     std::string(control_ + kWhatOffset)};
}

void MpiBootstrap::set_progress(uint64_t tag) {
  if (control_)
    progress_of(control_, node_index_[size_t(rank_)])->store(tag, std::memory_order_relaxed);
}

int MpiBootstrap::absent_member(const std::vector<int>& members) const {
  // Note [naming the missing rank]: a member still idle or in an earlier exchange of this member
  // set has surely not arrived; failing that, one in an exchange of another member set.
  if (!control_) return -1;
  uint64_t mine =
      progress_of(control_, node_index_[size_t(rank_)])->load(std::memory_order_relaxed);
  int elsewhere = -1;
  for (int m : members) {
    int i = node_index_[size_t(m)];
    if (m == rank_ || i < 0) continue;
    uint64_t theirs = progress_of(control_, i)->load(std::memory_order_relaxed);
    if (theirs == 0 || ((theirs >> 32) == (mine >> 32) && uint32_t(theirs) < uint32_t(mine)))
      return m;
    if ((theirs >> 32) != (mine >> 32) && elsewhere < 0) elsewhere = m;
  }
  return elsewhere;
}

void MpiBootstrap::check_usable(std::string_view op) const {
  SF_CHECK(!torn_down_,
           "{}: the mpi transport was shut down (MPI_Finalize); it cannot be used "
           "after finalize",
           op);
}

void MpiBootstrap::wait(MPI_Request& req, Waiter& waiter, const std::vector<int>& members,
                        MemberComm& mc, std::shared_ptr<void> keep) {
  try {
    for (;;) {
      int done = 0;
      SF_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
      if (done) return;
      waiter.set_peer(absent_member(members));
      waiter.pause();
    }
  } catch (const Error& e) {
    // The collective stays posted: its buffers must outlive it, and the communicator cannot be
    // used again (a later collective would match this one on the peers).
    abandoned_.push_back(std::move(keep));
    mc.broken = true;
    mc.why = e.what();
    throw;
  }
}

void MpiBootstrap::rendezvous(const std::vector<int>& members, std::string_view op) {
  // Every member sends (hash of the member list, size) to every other and receives theirs.
  struct Buffers {
    std::vector<uint64_t> mine, theirs;
    std::vector<MPI_Request> sends, recvs;
  };
  auto b = std::make_shared<Buffers>();
  uint64_t h = progress_tag(members, 0);
  b->mine = {h, members.size()};
  b->theirs.assign(2 * members.size(), 0);
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank_) continue;
    b->recvs.emplace_back();
    SF_MPI_CHECK(MPI_Irecv(&b->theirs[2 * i], 2, MPI_UINT64_T, members[i], kRendezvousTag, p2p_,
                           &b->recvs.back()));
    b->sends.emplace_back();
    SF_MPI_CHECK(MPI_Isend(b->mine.data(), 2, MPI_UINT64_T, members[i], kRendezvousTag, p2p_,
                           &b->sends.back()));
  }
  std::vector<int> peers;
  for (int m : members)
    if (m != rank_) peers.push_back(m);
  Waiter waiter(this, {op, "", rank_, -1});
  try {
    for (;;) {
      int first_missing = -1;
      for (size_t i = 0; i < b->recvs.size(); ++i) {
        int done = 0;
        SF_MPI_CHECK(MPI_Test(&b->recvs[i], &done, MPI_STATUS_IGNORE));
        if (!done && first_missing < 0) first_missing = peers[i];
      }
      if (first_missing < 0) break;
      waiter.set_peer(first_missing);
      waiter.pause();
    }
    SF_MPI_CHECK(MPI_Waitall(int(b->sends.size()), b->sends.data(), MPI_STATUSES_IGNORE));
  } catch (const Error&) {
    for (MPI_Request& r : b->recvs) {
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    }
    for (MPI_Request& r : b->sends)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    abandoned_.push_back(b);
    throw;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank_) continue;
    SF_CHECK(b->theirs[2 * i] == h && b->theirs[2 * i + 1] == members.size(),
             "{}: rank {} sets up an exchange among ranks {} but rank {} is setting up another "
             "set of ranks (new_group or collectives called in a different order)",
             op, rank_, fmt::join(members, ", "), members[i]);
  }
}

MpiBootstrap::MemberComm& MpiBootstrap::member_comm(const std::vector<int>& members,
                                                    std::string_view op) {
  auto it = comms_.find(members);
  if (it != comms_.end()) {
    if (it->second.broken)
      throw_error(ErrorCode::Mpi,
                  "{}: the exchange among ranks {} is unusable after an earlier "
                  "error: {}",
                  op, fmt::join(members, ", "), it->second.why);
    return it->second;
  }
  MemberComm mc;
  if (members.size() == 1) {
    SF_MPI_CHECK(MPI_Comm_dup(MPI_COMM_SELF, &mc.comm));
  } else {
    rendezvous(members, op);
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    SF_MPI_CHECK(MPI_Comm_group(world_, &world_group));
    SF_MPI_CHECK(MPI_Group_incl(world_group, int(members.size()), members.data(), &group));
    int rc = MPI_Comm_create_group(world_, group, kCreateTag, &mc.comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    SF_MPI_CHECK(rc);
  }
  SF_MPI_CHECK(MPI_Comm_set_errhandler(mc.comm, MPI_ERRORS_RETURN));
  return comms_[members] = mc;
}

std::vector<std::string> MpiBootstrap::allgather(const std::vector<int>& members,
                                                 const std::string& key, std::string data,
                                                 std::string_view op) {
  std::lock_guard lock(mutex_);
  check_usable(op);
  auto me = std::find(members.begin(), members.end(), rank_);
  SF_CHECK(me != members.end(), "{}: rank {} is not among the members {}", op, rank_,
           fmt::join(members, ", "));
  uint64_t seq = seq_[members]++;
  set_progress(progress_tag(members, seq));
  MemberComm& mc = member_comm(members, op);
  auto b = std::make_shared<ExchangeBuffers>();
  b->send.reserve(4 + key.size() + data.size());
  uint32_t key_len = uint32_t(key.size());
  b->send.append(reinterpret_cast<const char*>(&key_len), 4).append(key).append(data);
  b->length = (long long)b->send.size();
  b->lengths.assign(members.size(), 0);
  Waiter waiter(this, {op, "", rank_, -1});
  MPI_Request req = MPI_REQUEST_NULL;
  SF_MPI_CHECK(MPI_Iallgather(&b->length, 1, MPI_LONG_LONG, b->lengths.data(), 1, MPI_LONG_LONG,
                              mc.comm, &req));
  wait(req, waiter, members, mc, b);
  long long total = 0;
  for (long long n : b->lengths) {
    b->displs.push_back(int(total));
    b->counts.push_back(int(n));
    total += n;
  }
  SF_CHECK(total < INT_MAX, "{}: exchange of {} bytes is too large for the bootstrap", op, total);
  b->recv.resize(size_t(total));
  SF_MPI_CHECK(MPI_Iallgatherv(b->send.data(), int(b->length), MPI_CHAR, b->recv.data(),
                               b->counts.data(), b->displs.data(), MPI_CHAR, mc.comm, &req));
  wait(req, waiter, members, mc, b);

  std::vector<std::string> out(members.size()), keys(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const char* p = b->recv.data() + b->displs[i];
    uint32_t n = 0;
    std::memcpy(&n, p, 4);
    keys[i].assign(p + 4, n);
    out[i].assign(p + 4 + n, size_t(b->counts[i]) - 4 - n);
  }
  check_same_collective(keys, key, members, op);
  return out;
}

std::shared_ptr<SharedRegion> MpiBootstrap::allocate_shared(const std::vector<int>& members,
                                                            const std::string& key, size_t bytes,
                                                            std::string_view op) {
  std::lock_guard lock(mutex_);
  check_usable(op);
  // Every member decides this from the same data, so all raise together (no hang).
  for (int m : members)
    if (host_of(m) != host_of(members[0])) refuse_spanning_allocation(*this, members, op);
  MPI_Aint rounded = MPI_Aint((std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  // Note [mpi shared memory room]: the window's one segment (every member's block, each rounded
  // to pages) must fit in /dev/shm. Each member sends its size and what its /dev/shm has free.
  const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t need = (uint64_t(rounded) + page - 1) / page * page * members.size();
  std::vector<std::string> sizes =
      allgather(members, "allocate:" + key, fmt::format("{} {}", bytes, free_shm_bytes()), op);
  std::vector<std::string> requested(sizes.size());
  std::string short_of_room;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t space = sizes[i].find(' ');
    requested[i] = sizes[i].substr(0, space);
    const uint64_t free = std::strtoull(sizes[i].c_str() + space + 1, nullptr, 10);
    if (free < need)
      short_of_room += fmt::format("\n  rank {}: {}", members[i], out_of_shm_text(need, free));
  }
  for (size_t i = 0; i < requested.size(); ++i) {
    if (requested[i] == requested[0]) continue;
    std::string all;
    for (size_t j = 0; j < requested.size(); ++j)
      all += fmt::format("\n  rank {}: {} bytes", members[j], requested[j]);
    invalid_usage("{}: shared allocation '{}' differs in size across ranks:{}", op, key, all);
  }
  // Every member decides from the same data, so all raise together: MPI_Win_allocate_shared
  // would fail on the rank that creates the segment (MPI_ERR_INTERN) and leave the others
  // waiting in it, past MPI_Finalize.
  if (!short_of_room.empty())
    throw_error(ErrorCode::System,
                "{}: host shared memory '{}' ({} bytes per rank, one segment of {} bytes for the "
                "{} ranks of the host) does not fit:{}",
                op, key, bytes, need, members.size(), short_of_room);
  MemberComm& mc = member_comm(members, op);
  size_t index = size_t(std::find(members.begin(), members.end(), rank_) - members.begin());
  MPI_Info info = MPI_INFO_NULL;
  SF_MPI_CHECK(MPI_Info_create(&info));
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void* base = nullptr;
  MPI_Win win = MPI_WIN_NULL;
  int rc = MPI_Win_allocate_shared(rounded, 1, info, mc.comm, &base, &win);
  MPI_Info_free(&info);
  SF_MPI_CHECK(rc);
  windows_.push_back(win);
  SF_MPI_CHECK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  std::vector<void*> blocks(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    MPI_Aint size = 0;
    int disp = 0;
    SF_MPI_CHECK(MPI_Win_shared_query(win, int(i), &size, &disp, &blocks[i]));
  }
  // Direct loads and stores in one passive epoch for the window's life (the usual idiom for
  // shared windows); memory order among ranks is by the atomics of the layers above.
  SF_MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
  std::memset(base, 0, size_t(rounded));
  SF_MPI_CHECK(MPI_Win_sync(win));
  allgather(members, "allocated:" + key, "", op);  // every block is zeroed before anyone uses it
  SF_MPI_CHECK(MPI_Win_sync(win));
  return std::make_shared<MpiRegion>(std::move(blocks), index, bytes);
}

void MpiBootstrap::teardown() noexcept {
  std::lock_guard lock(mutex_);
  if (torn_down_) return;
  torn_down_ = true;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A bounded barrier: only when every rank is here is the collective freeing safe. The bound is
  // generous (at least kTeardownMinS): a rank that gives up while its peers' barrier completes
  // would leave them waiting in MPI_Win_free, so giving up must only happen when a rank is gone.
  bool everyone = false;
  MPI_Request req = MPI_REQUEST_NULL;
  double limit = std::max(timeout_s(), kTeardownMinS);
  if (MPI_Ibarrier(p2p_, &req) == MPI_SUCCESS) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
    while (std::chrono::steady_clock::now() < deadline) {
      int done = 0;
      if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      if (done) {
        everyone = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (!everyone) {
    std::fprintf(stderr,
                 "symmflow: rank %d: not every rank reached MPI_Finalize within %g s; "
                 "leaving shared windows to the MPI library\n",
                 rank_, limit);
    control_ = nullptr;
    return;
  }
  for (MPI_Win& w : windows_) {
    MPI_Win_unlock_all(w);
    MPI_Win_free(&w);
  }
  windows_.clear();
  // A communicator with a collective still posted (broken) is left to the MPI library.
  bool world_broken = false;
  for (auto& [members, mc] : comms_) {
    if (mc.comm == world_)
      world_broken = mc.broken;
    else if (!mc.broken)
      MPI_Comm_free(&mc.comm);
  }
  comms_.clear();
  control_ = nullptr;
  MPI_Win_unlock_all(control_win_);
  MPI_Win_free(&control_win_);
  MPI_Comm_free(&node_);
  MPI_Comm_free(&p2p_);
  if (!world_broken) MPI_Comm_free(&world_);
}

}  // namespace symmflow
