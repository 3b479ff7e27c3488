// rereg-in-flight: no MR is re-registered (ibv_rereg_mr with a new
// translation, PD or access flags) while an outstanding WR uses it or a
// valid memory window is bound to it.
//
// ibv_rereg_mr(3): "Conceptually, this call performs the functions
// deregister memory region followed by register memory region."  A WR
// the NIC has not finished with meets a registration changed under it: a
// new translation moves the MR to other memory (what a SEND still
// outstanding carries is undefined: the old bytes, the new ones, or a
// protection error), a new PD or new access flags change the answer of
// the NIC's protection check for a WR it has not executed yet, and a NIC
// may replace the key while it swaps the registration (softnic revokes
// the old one before the new one is in place, as a deregistration
// followed by a registration would).  Each change therefore needs what a
// deregistration needs: the completions that retire the WRs using the MR
// polled first.  A window bound to the MR makes a NIC refuse the call
// (softnic: EBUSY); the program meant to move or re-protect memory a peer
// can still reach through the window's key.  The rereg of an idle MR is
// what the verb is for and stays silent, as does a call that cannot have
// touched the MR: no change flag, or refused by libibverbs first
// (IBV_REREG_MR_ERR_INPUT, ERR_DONT_FORK_NEW: "Old MR is valid").  A call
// that failed in the device (ERR_CMD: the MR "shouldn't be used") is
// reported like one that succeeded: the WRs in flight are as lost.  A
// window whose LOCAL_INV is still in flight is invalidate-in-flight's.
//
// Its own id, not dereg-in-flight's, though the bug is the same one by
// another verb: (1) its invariant is wider than a deregistration's: PD and
// access changes, and bound windows (which for ibv_dereg_mr are
// destroy-in-use's); (2) ids are what users write in suppressions and
// checks=: a suppression of a known teardown dereg-in-flight (a test
// suite's PD.close with receives still posted) must not also silence a
// rereg in the data path, and a program can turn this one off alone; (3)
// the SUMMARY's id names the verb to look at, and the fix differs
// (poll first, or register a second MR and switch to it).
#include "absl/strings/str_cat.h"
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

// "translation to [0x.., +n)", "PD 0x1 -> 0x9", "access 0x7 -> 0x1", as asked.
std::string Changes(const core::Event& e, const MrState& mr) {
  std::string out;
  auto add = [&](const std::string& part) { absl::StrAppend(&out, out.empty() ? "" : ", ", part); };
  if (e.count & IBV_REREG_MR_CHANGE_TRANSLATION)
    add(absl::StrFormat("translation to [0x%x, +%d)", e.addr, e.length));
  if (e.count & IBV_REREG_MR_CHANGE_PD) add(absl::StrFormat("PD 0x%x -> 0x%x", mr.pd, e.parent));
  if (e.count & IBV_REREG_MR_CHANGE_ACCESS) add(absl::StrFormat("access 0x%x -> 0x%x", mr.access, e.access));
  if (e.ret != 0) absl::StrAppend(&out, absl::StrFormat("; the call failed (%d)", e.ret));
  return out;
}

}  // namespace

void CheckReregInFlight(CheckContext& c) {
  const core::Event& e = c.e;
  if (!ReregTouchesMr(e)) return;
  const MrState* mr = c.s.Mr(e.obj);
  if (!mr) return;
  const std::string what =
      absl::StrFormat("MR 0x%x (lkey 0x%x) re-registered (%s)", e.obj, mr->lkey, Changes(e, *mr));
  const std::string registered = absl::StrFormat("MR 0x%x registered at", e.obj);
  uint64_t count = 0;
  core::ObjId on = 0;
  if (const OutstandingWr* first = OldestUseOfLkey(c.s, mr->lkey, &count, &on)) {
    c.Emit(core::CheckId::kReregInFlight,
           absl::StrFormat("%s with %d outstanding WR(s) using it, e.g. on %s: the NIC may still use the old "
                           "registration until the completion that retires the WR is polled",
                           what, count, c.s.Qp(on) ? QpName(c.s, on) : absl::StrFormat("SRQ 0x%x", on)),
           {{core::StackKind::kPosted, WrLabel(*first, "outstanding"), first->stack},
            {core::StackKind::kRegistered, registered, mr->stack}});
    return;
  }
  if (c.s.mws().empty()) return;
  const core::ObjId id = LowestIdWhere(c.s.mws(), [&](const MwState& m) { return m.valid && m.mr == e.obj; });
  if (!id) return;
  const MwState& m = *c.s.Mw(id);
  c.Emit(
      core::CheckId::kReregInFlight,
      absl::StrFormat("%s while memory window MW 0x%x bound to it is valid (rkey 0x%x grants remote access "
                      "to [0x%x, +%d)); invalidate the window first",
                      what, id, m.rkey, m.addr, m.length),
      {{core::StackKind::kBound, "window bound at", m.bound_at},
       {core::StackKind::kAllocated, absl::StrFormat("MW 0x%x allocated at", id), m.stack},
       {core::StackKind::kRegistered, registered, mr->stack}});
}

}  // namespace rdmasan::checkers
