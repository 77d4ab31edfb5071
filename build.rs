//! Build identity for `devstack version` and `--version`: the commit
//! (short sha, `-dirty` when tracked files differ from it), the build date
//! and the target triple, as `DEVSTACK_BUILD_*` compile-time variables.
//!
//! Without git (a source tarball) the commit comes from the
//! `.cargo_vcs_info.json` that `cargo package` writes, else it is
//! `unknown`. The script reruns when the checked-out commit moves (HEAD and
//! the ref it points to) or a source file changes (which rebuilds the crate
//! anyway), not on every change in the checkout.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let build = Identity::of(&dir);
    for path in &build.watched {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    for path in ["build.rs", "src", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={path}");
    }
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    let target = std::env::var("TARGET").unwrap_or_else(|_| UNKNOWN.into());
    println!("cargo:rustc-env=DEVSTACK_BUILD_COMMIT={}", build.commit);
    println!("cargo:rustc-env=DEVSTACK_BUILD_DATE={}", build_date());
    println!("cargo:rustc-env=DEVSTACK_BUILD_TARGET={target}");
}

const UNKNOWN: &str = "unknown";

/// The commit a checkout at `dir` builds, and the files whose change moves it.
struct Identity {
    commit: String,
    watched: Vec<PathBuf>,
}

impl Identity {
    fn of(dir: &Path) -> Identity {
        from_git(dir)
            .or_else(|| from_package(dir))
            .unwrap_or_else(|| Identity {
                commit: UNKNOWN.into(),
                watched: Vec::new(),
            })
    }
}

/// `git` run in `dir`, its trimmed output when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        // `git status` would otherwise refresh the index, taking its lock
        // while the developer may be committing.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn from_git(dir: &Path) -> Option<Identity> {
    // A tarball unpacked inside another repository is not that repository's commit.
    let top = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != dir.canonicalize().ok()? {
        return None;
    }
    let sha = git(dir, &["rev-parse", "--short", "HEAD"])?;
    let changed = git(dir, &["status", "--porcelain", "--untracked-files=no"])?;
    let commit = if changed.is_empty() {
        sha
    } else {
        format!("{sha}-dirty")
    };
    let mut watched = Vec::new();
    // HEAD is the worktree's own; refs live in the common directory.
    if let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]) {
        watched.push(Path::new(&git_dir).join("HEAD"));
    }
    let common = git(dir, &["rev-parse", "--git-common-dir"]).map(|d| dir.join(d));
    let head_ref = git(dir, &["symbolic-ref", "-q", "HEAD"]);
    if let (Some(common), Some(head_ref)) = (common, head_ref) {
        // A missing file counts as changed on every build: watch the loose
        // ref where there is one, else the packed refs that hold it.
        let loose = common.join(&head_ref);
        let packed = common.join("packed-refs");
        watched.extend([loose, packed].into_iter().find(|p| p.is_file()));
    }
    watched.retain(|p| p.is_file());
    Some(Identity { commit, watched })
}

/// `cargo package` records the commit it packaged from in
/// `.cargo_vcs_info.json`: `{"git": {"sha1": "…", "dirty": true}, …}`.
fn from_package(dir: &Path) -> Option<Identity> {
    let path = dir.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(&path).ok()?;
    let after = text.split_once("\"sha1\"")?.1;
    let sha: String = after
        .split_once('"')?
        .1
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    if sha.len() < 7 {
        return None;
    }
    let dirty = text.contains("\"dirty\": true") || text.contains("\"dirty\":true");
    Some(Identity {
        commit: format!("{}{}", &sha[..7], if dirty { "-dirty" } else { "" }),
        watched: vec![path],
    })
}

/// Today in UTC as `YYYY-MM-DD`, or `SOURCE_DATE_EPOCH`'s day for a
/// reproducible build.
fn build_date() -> String {
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    format!("{year:04}-{month:02}-{day:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Run by the unit tier (tests/unit/main.rs includes this file): cargo
/// runs no tests of a build script.
#[cfg(test)]
mod tests {
    use super::*;

    fn have_git() -> bool {
        let found = Command::new("git").arg("--version").output().is_ok();
        if !found {
            eprintln!(
                "SKIPPED: {}: no `git` on PATH",
                std::thread::current().name().unwrap_or("build identity")
            );
        }
        found
    }

    fn run_git(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    #[test]
    fn a_checkout_names_its_commit_dirty_only_for_tracked_changes() {
        if !have_git() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        run_git(dir, &["init", "-q", "-b", "trunk"]);
        std::fs::write(dir.join("a.txt"), "one").unwrap();
        run_git(dir, &["add", "a.txt"]);
        run_git(dir, &["commit", "-q", "-m", "one"]);
        let sha = git(dir, &["rev-parse", "--short", "HEAD"]).unwrap();

        let clean = Identity::of(dir);
        assert_eq!(clean.commit, sha);
        let git_dir = dir.canonicalize().unwrap().join(".git");
        assert!(
            clean.watched.contains(&git_dir.join("HEAD")),
            "{:?}",
            clean.watched
        );
        assert!(
            clean
                .watched
                .iter()
                .any(|p| p.ends_with(".git/refs/heads/trunk")),
            "{:?}",
            clean.watched
        );

        std::fs::write(dir.join("new.txt"), "untracked").unwrap();
        assert_eq!(
            Identity::of(dir).commit,
            sha,
            "untracked files are no change"
        );
        std::fs::write(dir.join("a.txt"), "two").unwrap();
        assert_eq!(Identity::of(dir).commit, format!("{sha}-dirty"));

        // Once packed, the ref is watched where it now lives.
        run_git(dir, &["checkout", "-q", "--", "a.txt"]);
        run_git(dir, &["pack-refs", "--all"]);
        let packed = Identity::of(dir);
        assert_eq!(packed.commit, sha);
        assert!(
            packed.watched.iter().any(|p| p.ends_with("packed-refs")),
            "{:?}",
            packed.watched
        );
    }

    #[test]
    fn without_git_the_commit_is_the_packaged_one_or_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let bare = Identity::of(dir);
        assert_eq!(bare.commit, "unknown");
        assert!(bare.watched.is_empty());

        let sha1 = "0123456789abcdef0123456789abcdef01234567";
        std::fs::write(
            dir.join(".cargo_vcs_info.json"),
            format!(
                "{{\n  \"git\": {{\n    \"sha1\": \"{sha1}\"\n  }},\n  \"path_in_vcs\": \"\"\n}}"
            ),
        )
        .unwrap();
        assert_eq!(Identity::of(dir).commit, "0123456");
        std::fs::write(
            dir.join(".cargo_vcs_info.json"),
            format!("{{\"git\": {{\"sha1\": \"{sha1}\", \"dirty\": true}}}}"),
        )
        .unwrap();
        assert_eq!(Identity::of(dir).commit, "0123456-dirty");
    }

    #[test]
    fn days_since_the_epoch_are_calendar_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_000), (2024, 10, 4));
        assert_eq!(civil_from_days(20_792), (2026, 12, 5));
    }
}
