//! The shipped ci profile, adapted for one test: its stack name, the kit's
//! bundle, and the lines a test adds to a section.

use std::path::{Path, PathBuf};

use super::bundle_dir;

/// `profiles/ci.yaml` as a test writes it; each edit finds its section or
/// fails, so a changed profile breaks the tests loudly, not silently.
pub struct CiProfile {
    text: String,
}

/// The ci profile for the stack `name`, with the kit's offline bundle.
pub fn ci(name: &str) -> CiProfile {
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/ci.yaml"))
            .expect("profiles/ci.yaml");
    CiProfile { text: shipped }
        .replace("name: ci\n", &format!("name: {name}\n"))
        .replace(
            "secrets:\n",
            &format!("images:\n  bundle: {}\nsecrets:\n", bundle_dir().display()),
        )
}

impl CiProfile {
    fn replace(mut self, anchor: &str, with: &str) -> Self {
        assert!(
            self.text.contains(anchor),
            "profiles/ci.yaml has no `{}`: update tests/common/profile.rs",
            anchor.trim_end()
        );
        self.text = self.text.replacen(anchor, with, 1);
        self
    }

    fn insert_after(self, anchor: &str, lines: &str) -> Self {
        let with = format!("{anchor}{lines}");
        self.replace(anchor, &with)
    }

    /// The profile with its line `line` (newline included) replaced.
    pub fn replace_line(self, line: &str, with: &str) -> Self {
        self.replace(line, with)
    }

    /// Lines (indented two spaces) added at the top of `cluster:`.
    pub fn cluster(self, lines: &str) -> Self {
        self.insert_after("cluster:\n", lines)
    }

    /// The profile with `cluster.provider` set to `provider`.
    pub fn provider(self, provider: &str) -> Self {
        self.replace("  provider: k3s\n", &format!("  provider: {provider}\n"))
    }

    /// Lines added at the top of `localstack:`.
    pub fn localstack(self, lines: &str) -> Self {
        self.insert_after("localstack:\n", lines)
    }

    /// The profile with its GitOps source the branch `main` of the git
    /// repository at `url`, the manifests at `path` in it, and Flux
    /// fetching it (and reconciling) every `interval`.
    pub fn git_source(self, url: &str, path: &str, interval: &str) -> Self {
        self.replace(
            "  source: local\n",
            &format!("  source: git\n  git:\n    url: {url}\n    branch: main\n    path: {path}\n"),
        )
        .replace("  interval: 10m\n", &format!("  interval: {interval}\n"))
    }

    /// Secret entries added before the profile's own.
    pub fn secrets(self, entries: &str) -> Self {
        self.insert_after("secrets:\n", entries)
    }

    /// YAML appended at the end (a section the profile does not have).
    pub fn append(mut self, yaml: &str) -> Self {
        self.text.push_str(yaml);
        self
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Writes the profile to `path` (its directory created) and returns it.
    pub fn write(self, path: &Path) -> PathBuf {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, &self.text).unwrap();
        path.to_path_buf()
    }
}
