// softnic/interrupt: how softnic's blocking waits answer a signal, as the
// kernel's waits of the verbs they stand for do.
//
// A real completion channel, async fd and rdma_cm fd are read with a
// blocking read(2): a signal whose handler was installed without
// SA_RESTART ends the read with EINTR (so ibv_get_cq_event,
// ibv_get_async_event and rdma_get_cm_event return -1, errno EINTR: a
// tool's SIGALRM timer ends its test that way), one with SA_RESTART lets
// it go on.  softnic's waits are poll(2)s and epoll_wait(2)s, which the
// kernel never restarts; after one returns EINTR, RestartAfterSignal says
// which of the two the program would have seen.
//
// The kernel knows which handler ran; a process does not.  So: restart
// when every installed handler of an asynchronous signal restarts, end the
// wait otherwise (a program with both kinds, interrupted by the restarting
// one, sees EINTR: a program that installs a handler without SA_RESTART
// handles EINTR from its waits).  The synchronous fault signals (SIGSEGV,
// SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS) and SIGABRT do not interrupt a
// wait from outside and are not asked.
// May not: change any signal's disposition, or be called on a hot path
// (one sigaction(2) per signal number).
#ifndef RDMASAN_SOFTNIC_INTERRUPT_H_
#define RDMASAN_SOFTNIC_INTERRUPT_H_

namespace rdmasan::softnic {

// After a wait ended with EINTR: true if it should go on waiting.
bool RestartAfterSignal();

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_INTERRUPT_H_
