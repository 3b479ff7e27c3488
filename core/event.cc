#include "core/event.h"

namespace rdmasan::core {

const char* EventKindName(EventKind k) {
  static constexpr const char* kNames[] = {"open_device",
                                           "close_device",
                                           "alloc_pd",
                                           "dealloc_pd",
                                           "reg_mr",
                                           "dereg_mr",
                                           "create_comp_channel",
                                           "destroy_comp_channel",
                                           "create_cq",
                                           "destroy_cq",
                                           "create_srq",
                                           "modify_srq",
                                           "destroy_srq",
                                           "create_qp",
                                           "modify_qp",
                                           "destroy_qp",
                                           "create_ah",
                                           "destroy_ah",
                                           "post_send",
                                           "post_recv",
                                           "post_srq_recv",
                                           "poll_cq",
                                           "req_notify_cq",
                                           "wait_cq_event",
                                           "get_cq_event",
                                           "ack_cq_events",
                                           "async_event",
                                           "retire",
                                           "free_range",
                                           "fork",
                                           "fork_init",
                                           "decision",
                                           "alloc_mw",
                                           "dealloc_mw",
                                           "bind_mw",
                                           "rereg_mr",
                                           "remote_inv",
                                           "wc_reason",
                                           "resize_cq",
                                           "post_srq_ops",
                                           "tm_wc",
                                           "dest_modified"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(EventKind::kCount));
  auto i = static_cast<size_t>(k);
  return i < static_cast<size_t>(EventKind::kCount) ? kNames[i] : "unknown";
}

}  // namespace rdmasan::core
