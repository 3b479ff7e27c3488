// interpose/fuzz_api: the functions of include/rdmasan/rdmasan_fuzz.h, for
// in-process fuzzing with libFuzzer (the header says what they promise).
//
// rdmasan_fuzz_begin rebuilds the decider around the input's bytes
// (faults.h: ResetDecisionsForFuzz, which also resets the scheduler);
// rdmasan_fuzz_end compares the reporter's counts with those at begin and
// aborts after an Error finding.  The event hook (hooks.h: SetFuzzEventHook)
// turns what the checkers see into libFuzzer extra counters: completion
// kind × status × QP state × sends outstanding × the previous completion on
// the CQ, decisions, findings, and pairs of consecutive verbs calls.
//
// May not: do anything unless the program calls one of these functions (the
// hook is unset, the preloaded library behaves as without this file);
// allocate per event once the maps hold the program's QPs and CQs; hold
// the input's bytes past the next begin.  Single-threaded by contract.

#include <algorithm>
#include <cstdlib>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/decision.h"
#include "core/options.h"
#include "core/report.h"
#include "core/status.h"
#include "include/rdmasan/rdmasan_fuzz.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"

namespace rdmasan::interpose {
namespace {

struct QpTrack {
  uint32_t state = 0;        // ibv_qp_state as last modified
  uint32_t outstanding = 0;  // send WRs posted and not yet seen complete (this input)
};

struct Fuzz {
  bool inited = false;
  core::Options options;  // what every input's decider is built from
  uint8_t* counters = nullptr;
  size_t ncounters = 0;
  size_t findings_at_begin = 0;
  uint32_t prev_kind = 0;                                // the previous event's kind
  absl::flat_hash_map<core::ObjId, QpTrack> qps;         // by rdmasan's QP id
  absl::flat_hash_map<uint32_t, core::ObjId> qp_by_num;  // qp_num -> id
  absl::flat_hash_map<core::ObjId, uint32_t> last_wc;    // CQ id -> its last completion's class
};

Fuzz& F() {
  static Fuzz* f = new Fuzz();
  return *f;
}

inline void Bump(uint64_t feature) {
  Fuzz& f = F();
  if (!f.counters) return;
  uint64_t h = feature * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  uint8_t& c = f.counters[h % f.ncounters];
  if (c != 255) ++c;
}

// 1 send-side success, 2 receive success, 3 + status: an error.
uint32_t WcClass(const core::Completion& c) {
  if (c.status != 0) return 3 + (c.status & 31);
  return (c.opcode & IBV_WC_RECV) ? 2 : 1;
}

void OnEvent(const core::Event& e, const std::vector<core::Finding>& findings) {
  Fuzz& f = F();
  const uint32_t kind = static_cast<uint32_t>(e.kind);
  Bump((uint64_t{1} << 56) | (uint64_t{f.prev_kind} << 8) | kind);
  f.prev_kind = kind;
  switch (e.kind) {
    case core::EventKind::kCreateQp:
      if (e.ret == 0 && e.obj) {
        f.qps[e.obj] = QpTrack();
        f.qp_by_num[e.qp_num] = e.obj;
      }
      break;
    case core::EventKind::kModifyQp:
      if (e.ret == 0 && (e.attr_mask & IBV_QP_STATE)) f.qps[e.obj].state = e.qp_state;
      break;
    case core::EventKind::kPostSend:
      if (auto it = f.qps.find(e.obj); it != f.qps.end()) {
        const size_t n = e.bad_index < e.send_wrs.size() ? e.bad_index : e.send_wrs.size();
        it->second.outstanding += static_cast<uint32_t>(n);
      }
      break;
    case core::EventKind::kPollCq: {
      uint32_t& last = f.last_wc[e.obj];
      for (const auto& c : e.wcs) {
        QpTrack* q = nullptr;
        if (auto n = f.qp_by_num.find(c.qp_num); n != f.qp_by_num.end())
          if (auto it = f.qps.find(n->second); it != f.qps.end()) q = &it->second;
        const uint32_t cls = WcClass(c);
        const uint32_t out = q ? std::min<uint32_t>(q->outstanding, 3) : 7;
        Bump((uint64_t{2} << 56) | (uint64_t{cls} << 24) | (uint64_t{q ? q->state : 15} << 16) |
             (uint64_t{out} << 8) | last);
        if (q && cls == 1 && q->outstanding) --q->outstanding;
        last = cls;
      }
      break;
    }
    case core::EventKind::kDecision:
      Bump((uint64_t{3} << 56) | (uint64_t{e.count} << 8) | std::min<uint64_t>(e.addr, 15));
      break;
    default:
      break;
  }
  for (const auto& fd : findings)
    Bump((uint64_t{4} << 56) | (uint64_t{static_cast<uint32_t>(fd.check)} << 8) | f.prev_kind);
}

int Init(const char* extra) {
  Fuzz& f = F();
  auto& o = const_cast<core::Options&>(core::GlobalOptions());  // the hook's and RDMASAN_OPTIONS, parsed
  std::string text = "softnic=on:softnic_fabric=inproc:reorder=random:buffer_check=full";
  if (extra && *extra) absl::StrAppend(&text, ":", extra);
  if (const char* env = std::getenv("RDMASAN_OPTIONS")) absl::StrAppend(&text, ":", env);
  if (absl::Status st = core::ParseOptions(text, &o); !st.ok()) {
    for (const std::string& e : core::ErrorMessages(st))
      core::Diag(absl::StrCat("ERROR: rdmasan_fuzz_init: ", e));
    return -1;
  }
  f.options = o;
  f.inited = true;
  SetFuzzEventHook(OnEvent);
  // Until the first input: no decision (setup runs in the natural order).
  ResetDecisionsForFuzz(f.options, core::MakeByteSource(nullptr, 0));
  return 0;
}

}  // namespace
}  // namespace rdmasan::interpose

using rdmasan::interpose::F;

extern "C" __attribute__((visibility("default"))) int rdmasan_fuzz_init(const char* options) {
  if (F().inited) return 0;
  return rdmasan::interpose::Init(options);
}

extern "C" __attribute__((visibility("default"))) void rdmasan_fuzz_begin(const uint8_t* data, size_t size) {
  auto& f = F();
  if (!f.inited && rdmasan::interpose::Init(nullptr) != 0) std::abort();
  rdmasan::interpose::ResetDecisionsForFuzz(f.options, rdmasan::core::MakeByteSource(data, size));
  for (auto& [id, q] : f.qps) q.outstanding = 0;
  f.last_wc.clear();
  f.prev_kind = 0;
  f.findings_at_begin = rdmasan::core::GlobalReporter().TotalCount();
}

extern "C" __attribute__((visibility("default"))) int rdmasan_fuzz_end(void) {
  auto& r = rdmasan::core::GlobalReporter();
  const size_t n = r.TotalCount() - F().findings_at_begin;
  if (r.HadErrors()) {
    r.Message(absl::StrCat("fuzz: this input gave ", n,
                           " finding(s) with an Error among them (reported above); aborting so that the "
                           "fuzzer keeps the input"));
    std::abort();
  }
  return static_cast<int>(n);
}

extern "C" __attribute__((visibility("default"))) void rdmasan_fuzz_set_counters(uint8_t* counters,
                                                                                 size_t n) {
  F().counters = n ? counters : nullptr;
  F().ncounters = n;
}
