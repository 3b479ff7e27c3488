// checkers/use_after_destroy: the verbs that take a handle, and how a call
// on a dead one is told to the check.
//
// The interposer refuses every call whose handle (or whose handle's
// device context) the program already destroyed, and emits one event for
// it: the kind of the verb (or of its nearest relative, for verbs with no
// event of their own), ret = EINVAL (-1 for verbs that return a pointer or
// a count), err = EINVAL, the destroyed object's old id in the field that
// names it (obj, parent, send_cq, recv_cq, srq, channel, a WR's ah) and,
// for a verb that is not the kind's own, its code below in attr_mask.
// The table is the coverage: every verb × handle kind listed is refused.
//
// May not: name a verb here that the interposer does not refuse, or
// renumber a verb (traces keep the codes).
#ifndef RDMASAN_CHECKERS_USE_AFTER_DESTROY_H_
#define RDMASAN_CHECKERS_USE_AFTER_DESTROY_H_

#include <cstdint>

namespace rdmasan::checkers {

// X(Code, "verb name without ibv_", "handles it is refused for")
#define RDMASAN_UAD_VERBS(X)                                 \
  X(kByKind, "", "the event kind's own verb")                \
  X(kQueryQp, "query_qp", "QP, its context")                 \
  X(kQuerySrq, "query_srq", "SRQ, its context")              \
  X(kAttachMcast, "attach_mcast", "QP, its context")         \
  X(kDetachMcast, "detach_mcast", "QP, its context")         \
  X(kQpToQpEx, "qp_to_qp_ex", "QP, its context")             \
  X(kQueryEce, "query_ece", "QP, its context")               \
  X(kSetEce, "set_ece", "QP, its context")                   \
  X(kQueryQpDataInOrder, "query_qp_data_in_order", "QP")     \
  X(kWrStart, "wr_start", "QP (ibv_qp_ex)")                  \
  X(kWrComplete, "wr_complete", "QP (ibv_qp_ex)")            \
  X(kWrAbort, "wr_abort", "QP (ibv_qp_ex)")                  \
  X(kStartPoll, "start_poll", "CQ (ibv_cq_ex)")              \
  X(kCreateAhFromWc, "create_ah_from_wc", "PD, its context") \
  X(kRegDmabufMr, "reg_dmabuf_mr", "PD, its context")        \
  X(kImportMr, "import_mr", "PD, its context")               \
  X(kUnimportPd, "unimport_pd", "PD")                        \
  X(kUnimportMr, "unimport_mr", "MR")                        \
  X(kQueryDevice, "query_device", "context")                 \
  X(kQueryPort, "query_port", "context")                     \
  X(kQueryGid, "query_gid", "context")                       \
  X(kQueryGidEx, "query_gid_ex", "context")                  \
  X(kQueryGidTable, "query_gid_table", "context")            \
  X(kQueryPkey, "query_pkey", "context")                     \
  X(kGetPkeyIndex, "get_pkey_index", "context")              \
  X(kGetAsyncEvent, "get_async_event", "context")            \
  X(kInitAhFromWc, "init_ah_from_wc", "context")             \
  X(kResolveEthL2, "resolve_eth_l2_from_gid", "context")     \
  X(kImportPd, "import_pd", "context")                       \
  X(kImportDm, "import_dm", "context")                       \
  X(kQueryGidType, "query_gid_type", "context")              \
  X(kCreateQpEx, "create_qp_ex", "context, PD, CQs, SRQ")    \
  X(kCreateSrqEx, "create_srq_ex", "context, PD, CQ")        \
  X(kCreateCqEx, "create_cq_ex", "context, channel")         \
  X(kGetCqEvent, "get_cq_event", "channel")                  \
  X(kRegMrIova, "reg_mr_iova", "PD, its context")            \
  X(kNextPoll, "next_poll", "CQ (ibv_cq_ex)")

enum class UadVerb : uint32_t {
#define X(code, name, handles) code,
  RDMASAN_UAD_VERBS(X)
#undef X
      kCount
};

// "query_qp", or null for kByKind and codes out of range.
inline const char* UadVerbName(uint32_t code) {
  static constexpr const char* kNames[] = {
#define X(code, name, handles) name,
      RDMASAN_UAD_VERBS(X)
#undef X
  };
  return code > 0 && code < static_cast<uint32_t>(UadVerb::kCount) ? kNames[code] : nullptr;
}

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_USE_AFTER_DESTROY_H_
