// softnic/leftovers: what softnic's processes leave in the user directory
// (user_dir.h) when they end without cleaning up, and its removal.
//
// At every attach: fabric files that no process holds (each user holds a
// shared flock for life, and the kernel drops it however the process
// ends), and in each rdma_cm folder (cm-<fabric>) the inbox sockets that
// nobody has bound (a connect to one is refused: a socket is judged by the
// kernel, never by the pid in its name, which another process may have
// now), the port files nobody holds, and then the folder itself if that
// left it empty.  A process that makes a folder's first name meanwhile
// finds the folder gone and makes it again (cm.cc's Open).
//
// At a fatal signal (SIGTERM, SIGINT, SIGHUP at their default disposition,
// handled here once a file fabric is attached, unless the interposer's
// hang check wants them; and whatever signal the interposer's own handler
// catches, through CleanUpAtFatalSignal, softnic.h): the fabric file goes if this
// process is its last user, as at exit.  Only that: what was recorded at
// attach (fd, path, inode) is used, with flock, fstat, lstat and unlink,
// which are async-signal-safe.  The tables are not touched (the process's
// other threads still run on them until the signal ends it); the next
// attacher reaps its slot.
//
// May not: remove anything that is not this user's and private, anything
// a live process holds or has bound, or allocate or take a lock in a
// signal handler.
#ifndef RDMASAN_SOFTNIC_LEFTOVERS_H_
#define RDMASAN_SOFTNIC_LEFTOVERS_H_

#include <string>

namespace rdmasan::softnic {

// Removes fabric files in `dir` that no process holds.
void SweepStaleFabrics(const std::string& dir);
// Removes inboxes nobody has bound and port files nobody holds from the
// rdma_cm folder `folder`.
void SweepCmFolder(const std::string& folder);
// Both, over the user directory `dir` and each of its rdma_cm folders;
// removes the folders left empty.
void SweepLeftovers(const std::string& dir);

// A fabric file of this process (fd held with LOCK_SH, at `path`), to be
// removed at a fatal signal if this process is its last user.  Returns a
// handle for ForgetFabricFile, or -1 when the table is full (the file is
// then left to the next attach's sweep).
int RememberFabricFile(int fd, const std::string& path);
void ForgetFabricFile(int handle);

// Handles SIGTERM, SIGINT and SIGHUP where the program left them at their
// default: CleanUpAtFatalSignal, then the default action.  Once.
void CleanUpAtTermination();

// The name of fabric files in the user directory.
inline constexpr char kFabricFilePrefix[] = "fabric-";

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_LEFTOVERS_H_
