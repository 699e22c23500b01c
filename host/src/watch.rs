//! Waiting for a directory to change, without polling.
//!
//! Two things in the host wait on the file system: the policy directory
//! (reload when an operator drops a file in) and the runtime's socket
//! directory (connect the moment the runtime creates its socket, rather than
//! at the end of a back-off). Both use one inotify descriptor per directory,
//! read through tokio's reactor, so waiting costs no wake-ups at all.
//!
//! A watch is on the directory, not on the files: editors write a temporary
//! file and rename it, `kubectl cp` writes in place, and a ConfigMap volume
//! swaps a `..data` symlink. All of them change the directory's entries, or
//! a file in it, and every such change wakes the waiter. What changed is not
//! reported: the callers re-read what they care about, which is the only
//! answer that is right whatever the order of the events was.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use tokio::io::unix::AsyncFd;

/// What in a directory counts as a change: entries created, removed, renamed
/// in or out, files written and closed, attributes (permissions, the target
/// of a swapped symlink), and the directory itself going away.
const MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;

/// A watch on one directory.
#[derive(Debug)]
pub struct DirWatch {
    fd: AsyncFd<OwnedFd>,
    dir: PathBuf,
    /// The directory was removed or moved: the watch sees nothing any more.
    gone: bool,
}

impl DirWatch {
    /// Watches `dir`, which must exist. Must be called inside a tokio runtime.
    pub fn new(dir: &Path) -> io::Result<Self> {
        // SAFETY: plain system call; the descriptor is owned right after.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "directory path contains NUL"))?;
        // SAFETY: both arguments are valid for the duration of the call.
        let wd = unsafe { libc::inotify_add_watch(owned.as_raw_fd(), path.as_ptr(), MASK | libc::IN_ONLYDIR) };
        if wd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `owned` is an open inotify descriptor that the AsyncFd owns
        // from here on; nothing else closes or replaces it.
        let fd = unsafe { AsyncFd::register(owned) }.map_err(|e| e.into_parts().1)?;
        Ok(Self { fd, dir: dir.to_path_buf(), gone: false })
    }

    /// The directory watched.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the directory itself was removed or moved away (the watch
    /// then never fires again; make a new one once it is back).
    pub fn is_gone(&self) -> bool {
        self.gone
    }

    /// Waits until something changed, and returns the names of the entries
    /// the changes were about (empty for the directory itself).
    pub async fn changed(&mut self) -> io::Result<Vec<std::ffi::OsString>> {
        if self.gone {
            return std::future::pending().await;
        }
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| read_events(fd.get_ref())) {
                Ok(Ok(events)) => {
                    let mut names = Vec::new();
                    for (mask, name) in events {
                        if mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0 {
                            self.gone = true;
                        }
                        names.extend(name);
                    }
                    return Ok(names);
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }
}

/// Reads every queued event: its mask and the entry's name, if any.
fn read_events(fd: &OwnedFd) -> io::Result<Vec<(u32, Option<std::ffi::OsString>)>> {
    use std::os::unix::ffi::OsStrExt;
    // Room for many events; one read returns whole events only.
    let mut buf = [0u8; 16 << 10];
    let mut out = Vec::new();
    loop {
        // SAFETY: reading into a buffer we own, of the length given.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock && !out.is_empty() {
                return Ok(out);
            }
            return Err(e);
        }
        let n = n as usize;
        let header = std::mem::size_of::<libc::inotify_event>();
        let mut at = 0;
        while at + header <= n {
            // SAFETY: the kernel wrote a whole event header at `at`; read
            // unaligned, as the buffer has byte alignment.
            let ev: libc::inotify_event = unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast()) };
            let len = ev.len as usize;
            let name_bytes = &buf[at + header..(at + header + len).min(n)];
            let name = name_bytes.split(|b| *b == 0).next().filter(|s| !s.is_empty());
            out.push((ev.mask, name.map(|s| std::ffi::OsStr::from_bytes(s).to_os_string())));
            at += header + len;
        }
        if n < buf.len() / 2 {
            return Ok(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn next(w: &mut DirWatch) -> Vec<std::ffi::OsString> {
        tokio::time::timeout(Duration::from_secs(10), w.changed()).await.expect("a change is reported").unwrap()
    }

    #[tokio::test]
    async fn creation_writes_renames_and_removal_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = DirWatch::new(dir.path()).unwrap();
        std::fs::write(dir.path().join("10-a.wasm"), b"x").unwrap();
        assert!(next(&mut w).await.iter().any(|n| n == "10-a.wasm"));
        // Drain what the write itself caused (modify, close).
        while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(100), w.changed()).await {}
        std::fs::rename(dir.path().join("10-a.wasm"), dir.path().join("20-a.wasm")).unwrap();
        let names = next(&mut w).await;
        assert!(names.iter().any(|n| n == "10-a.wasm" || n == "20-a.wasm"), "{names:?}");
        while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(100), w.changed()).await {}
        // A ConfigMap-style swap of a symlink.
        std::os::unix::fs::symlink("x", dir.path().join("..data_tmp")).unwrap();
        std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
        let mut names = next(&mut w).await;
        while let Ok(Ok(more)) = tokio::time::timeout(Duration::from_millis(100), w.changed()).await {
            names.extend(more);
        }
        assert!(names.iter().any(|n| n == "..data"), "{names:?}");
        assert!(!w.is_gone());
        let path = dir.path().to_path_buf();
        drop(dir);
        let _ = next(&mut w).await;
        while !w.is_gone() {
            next(&mut w).await;
        }
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = DirWatch::new(&dir.path().join("nope")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
