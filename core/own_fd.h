// core/own_fd: the file descriptors rdmasan holds for a whole run (the
// trace, the report log, the decision log), kept out of the program's way.
//
// A program may close every descriptor above 2, or dup2 its own files onto
// numbers it takes to be free; a descriptor of ours caught in that loses
// the trace, or, its number reused by the program, carries our bytes into
// the program's file.  So, as valgrind reserves its own:
//  - AdoptFd moves each to the top of the descriptor range (from the soft
//    RLIMIT_NOFILE, capped at 65536, less 64, upwards), which a program's
//    lowest-free allocation does not reach, and records it in a fixed
//    table;
//  - the preloaded library's close, dup2, dup3, close_range and closefrom
//    (interpose/fd_hooks.cc) ask IsOwnFd and refuse to close or replace one
//    (EBADF, as valgrind answers; a range skips them);
//  - CheckOwnFd, called before a write, finds a descriptor that no longer
//    names its file (a raw close(2) syscall escapes every hook) and reopens
//    the file by its path, or gives -1: never a write into another file.
//
// May not: allocate, lock or make a system call in IsOwnFd (every close
// asks it); depend on a dynamic initialiser (the hooks run before ours).
#ifndef RDMASAN_CORE_OWN_FD_H_
#define RDMASAN_CORE_OWN_FD_H_

#include <cstdint>
#include <string>

namespace rdmasan::core {

// A descriptor of ours and the file it was opened on: the number alone
// does not say which file it is once the program has closed it behind our
// back and the number was reused (by the program, or for another of ours).
struct OwnFd {
  int fd = -1;
  uint64_t dev = 0, ino = 0;
};

// Moves `fd` to the reserved range (closing the original number) and
// records it as ours.  The result's fd is the moved one, or `fd` itself
// where it could not move (still recorded).  -1 stays -1.
OwnFd AdoptFd(int fd);

// Forgets `f` and closes it, if its number still names its file (else the
// number is someone else's now: only forgotten).  f->fd becomes -1.
void CloseOwnFd(OwnFd* f);

// Forgets `f` without closing it (a forked child's copy of its parent's).
void ForgetOwnFd(OwnFd* f);

// Whether `fd` is one of ours.
bool IsOwnFd(int fd);

// Ours, ascending, at most `max` of them into `out`; returns how many.
int OwnFds(int* out, int max);

// Before a write: true if f->fd still names f's file, or that file could be
// reopened at `path` for writing at its end (f updated); false, with f->fd
// -1, otherwise.  Never leaves f naming another file.
bool CheckOwnFd(OwnFd* f, const std::string& path);

// The lowest number of the reserved range (for tests and docs/traces.md).
int OwnFdBase();

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_OWN_FD_H_
