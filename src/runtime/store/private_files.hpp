// Directories and files that only this user may have written: the FileStore's directory and the
// store secret (private header).
//
// Note [private directory]: a store directory, or the directory of the secret file, is opened
// once, with O_NOFOLLOW, and checked through that descriptor: a real directory (not a symbolic
// link), owned by this process's effective user, and writable by neither group nor others. Every
// file in it is then reached relative to the descriptor (openat, renameat, fstatat with
// O_NOFOLLOW / AT_SYMLINK_NOFOLLOW), and files are created O_EXCL: renaming or replacing the
// path, or a parent of it, after the check changes nothing, and no link planted inside can
// redirect a write, since nobody else can write inside. The directory need not be created by
// this process (the ranks of a job share it, and one of them creates it), but one that another
// user owns, or that others can write, is refused: anyone who can write there can read or plant
// keys. Parents are not checked: the descriptor, not the path, is what is trusted.
#pragma once

#include <string>
#include <string_view>

namespace symmflow::store_detail {

// Creates `path` (mode 0700) when absent, then opens and checks it (Note [private directory]).
// Returns the directory's descriptor (O_CLOEXEC); raises System, "<who>: refusing <path>: ..."
// naming the path and why.
int open_private_directory(const std::string& path, std::string_view who);

// The contents of `name` in the directory `dir_fd` (or of `path` when dir_fd is AT_FDCWD), which
// must be a regular file of this user that group and others can neither read nor write (mode
// 0600 or stricter); raises System naming `shown` (the path for messages) and why.
std::string read_private_file(int dir_fd, const std::string& name, const std::string& shown,
                              std::string_view who);

}  // namespace symmflow::store_detail
