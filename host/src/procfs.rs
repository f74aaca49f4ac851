//! What the kernel reports of a process in `/proc/<pid>/stat`.
//!
//! The host reads it to find an exec's descendants and freeze them, and to tell its
//! own runs' owners from processes that reuse their pids. One parser serves both:
//! the command name (field 2) is in parentheses and may hold spaces, `)` and newlines,
//! so the fields are read only after the last `)`.

use std::io;

/// The fields of `/proc/<pid>/stat` the host uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `T`, `Z`, ... (field 3).
    pub state: char,
    /// The parent's pid (field 4).
    pub parent: libc::pid_t,
    /// The process group (field 5).
    pub process_group: libc::pid_t,
    /// The session (field 6).
    pub session: libc::pid_t,
    /// Clock ticks from boot to the process's start (field 22).
    pub start_ticks: u64,
}

impl Stat {
    /// The stat of `pid`, or `None` when no such process exists.
    pub fn read(pid: libc::pid_t) -> io::Result<Option<Stat>> {
        let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(text) => text,
            // ESRCH: the process ended between the open and the read.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        Stat::parse(&text)
            .map(Some)
            .ok_or_else(|| io::Error::other(format!("/proc/{pid}/stat is malformed")))
    }

    /// The stat of `pid` when it can be read; `None` when it is gone or unreadable.
    pub fn of(pid: libc::pid_t) -> Option<Stat> {
        Stat::read(pid).ok().flatten()
    }

    fn parse(text: &str) -> Option<Stat> {
        let (_, after_name) = text.rsplit_once(')')?;
        let mut fields = after_name.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let parent = fields.next()?.parse().ok()?;
        let process_group = fields.next()?.parse().ok()?;
        let session = fields.next()?.parse().ok()?;
        // Fields 7 to 21 lie between the session (field 6) and the start time.
        let start_ticks = fields.nth(15)?.parse().ok()?;
        Some(Stat {
            state,
            parent,
            process_group,
            session,
            start_ticks,
        })
    }

    /// A zombie (or a process being torn down) runs nothing any more.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }

    /// Stopped by a signal or a tracer, or dead: it cannot fork.
    pub fn is_stopped_or_dead(&self) -> bool {
        matches!(self.state, 'T' | 't') || self.is_dead()
    }
}

/// Whether `pid` is gone, or a zombie waiting to be reaped.
pub fn is_dead(pid: libc::pid_t) -> bool {
    Stat::of(pid).is_none_or(|stat| stat.is_dead())
}

/// Every pid in this process's `/proc`, dead or alive.
pub fn pids() -> io::Result<impl Iterator<Item = libc::pid_t>> {
    let entries = std::fs::read_dir("/proc")?.flatten();
    Ok(entries.filter_map(|entry| entry.file_name().to_str()?.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_read_after_the_last_parenthesis_of_the_name() {
        // A name may hold `) Z 1` and a newline; the real fields follow the last `)`.
        let text = "4242 (evil) Z 1\n(x)) S 17 4242 4200 0 -1 4194304 0 0 0 0 0 0 0 0 \
                    20 0 1 0 987654 2654208 404 18446744073709551615\n";
        let stat = Stat::parse(text).unwrap();
        assert_eq!(
            stat,
            Stat {
                state: 'S',
                parent: 17,
                process_group: 4242,
                session: 4200,
                start_ticks: 987654,
            }
        );
        assert!(!stat.is_dead() && !stat.is_stopped_or_dead());
        assert_eq!(Stat::parse("4242 (truncated) S 17"), None);
    }

    #[test]
    fn this_process_reads_as_itself_and_a_free_pid_as_gone() {
        let me = std::process::id() as libc::pid_t;
        let stat = Stat::read(me).unwrap().unwrap();
        // SAFETY: getppid and getsid have no preconditions.
        let (parent, session) = unsafe { (libc::getppid(), libc::getsid(0)) };
        assert_eq!((stat.parent, stat.session), (parent, session));
        assert!(pids().unwrap().any(|pid| pid == me));
        assert!(!is_dead(me));
        // Above the kernel's largest pid_max: never a process.
        assert_eq!(Stat::read(1 << 23).unwrap(), None);
        assert!(is_dead(1 << 23));
    }
}
