//! Facts about the host that preflight checks need: free ports and who holds
//! them, memory, disk and inotify limits, the versions of tools on PATH.
//! Linux facts come from /proc.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

/// Whether a TCP port can be bound on `address` right now.
pub fn port_is_free(address: IpAddr, port: u16) -> bool {
    // A port bound on 0.0.0.0 by someone else blocks 127.0.0.1 too, and the
    // other way round for Docker's proxy; test both.
    let wildcard = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    [address, wildcard]
        .iter()
        .all(|a| TcpListener::bind(SocketAddr::new(*a, port)).is_ok())
}

/// A free TCP port on 127.0.0.1 chosen by the kernel.
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The process listening on a TCP port, as "name (pid N)", when /proc tells.
pub fn port_holder(port: u16) -> Option<String> {
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| text.lines().skip(1).map(str::to_string).collect::<Vec<_>>())
        .find_map(|line| listening_inode(&line, port))?;
    let needle = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = entry.file_name().to_string_lossy().to_string();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == needle) {
                let comm = std::fs::read_to_string(entry.path().join("comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_else(|_| "?".into());
                return Some(format!("{comm} (pid {pid})"));
            }
        }
    }
    None
}

/// Parses one /proc/net/tcp line; returns the socket inode when it is a
/// listener on `port`.
fn listening_inode(line: &str, port: u16) -> Option<String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local = fields.get(1)?;
    let state = fields.get(3)?;
    let hex_port = local.rsplit(':').next()?;
    if *state == "0A" && u16::from_str_radix(hex_port, 16).ok()? == port {
        fields.get(9).map(|s| s.to_string())
    } else {
        None
    }
}

/// MemAvailable from /proc/meminfo, in bytes.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Free bytes on the filesystem holding `path` (for unprivileged users).
pub fn free_disk(path: &Path) -> Option<u64> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c_path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c_path is a valid NUL-terminated string and stat is a valid out-pointer.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) };
    (rc == 0).then(|| stat.f_bavail as u64 * stat.f_frsize as u64)
}

pub fn read_sysctl(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `TOOL version`-style output, first line, bounded in time.
pub async fn tool_version(path: &Path, args: &[&str]) -> Option<String> {
    let output = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::process::Command::new(path).args(args).output(),
    )
    .await
    .ok()?
    .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .next()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
}

/// Extracts the first `vX.Y.Z` from a version line.
pub fn parse_semver(text: &str) -> Option<(u64, u64, u64)> {
    text.split(|c: char| c.is_whitespace() || c == ':' || c == ',' || c == '"')
        .filter_map(|word| {
            let word = word.strip_prefix('v').unwrap_or(word);
            let mut parts = word.split(|c: char| !c.is_ascii_digit());
            let major = parts.next()?.parse().ok()?;
            let minor = parts.next()?.parse().ok()?;
            let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            Some((major, minor, patch))
        })
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_listening_socket_line() {
        let line = "   1: 0100007F:11D6 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 424242 1 0000000000000000 100 0 0 10 0";
        assert_eq!(listening_inode(line, 4566).as_deref(), Some("424242"));
        assert_eq!(listening_inode(line, 4567), None);
        let established = line.replace(" 0A ", " 01 ");
        assert_eq!(listening_inode(&established, 4566), None);
    }

    #[test]
    fn a_bound_port_is_reported_taken_and_its_holder_named() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(!port_is_free(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
        let holder = port_holder(port).expect("our own process holds the port");
        assert!(
            holder.contains(&format!("pid {}", std::process::id())),
            "{holder}"
        );
        drop(listener);
        assert!(port_is_free(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }

    #[test]
    fn parses_tool_versions() {
        assert_eq!(
            parse_semver("kind v0.30.0 go1.24.6 linux/amd64"),
            Some((0, 30, 0))
        );
        assert_eq!(parse_semver("flux: v2.6.4"), Some((2, 6, 4)));
        assert_eq!(parse_semver("Client Version: v1.33.1"), Some((1, 33, 1)));
        assert_eq!(parse_semver("no version here"), None);
    }
}
