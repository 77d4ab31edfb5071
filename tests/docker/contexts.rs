//! Docker tier: devstack finds the engine as the Docker CLI does. Every
//! context here is made by the Docker CLI itself (`docker context create`)
//! in a temporary DOCKER_CONFIG, never the machine's ~/.docker; the
//! contexts point at second addresses of the real engine (a symlink to its
//! socket, a TLS relay in front of it) or at a socket nobody listens on.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use crate::common::*;

/// The variables that choose the engine: unset for every run here, so that
/// each test states its own.
const ENGINE_VARIABLES: [&str; 5] = [
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
];

/// A temporary Docker CLI configuration with its context store, and the
/// stack devstack runs `doctor` for.
struct Contexts {
    stack: TestStack,
    profile: PathBuf,
    config: tempfile::TempDir,
}

impl Contexts {
    fn new(prefix: &str) -> Self {
        let stack = TestStack::new(prefix);
        // K3s: doctor then has no kind to fetch; the engine check is the same.
        let profile = stack.profile("cluster:\n  provider: k3s\n");
        Contexts {
            stack,
            profile,
            config: tempfile::tempdir().unwrap(),
        }
    }

    /// `unix://` of a socket nothing listens on, in the stack's directory.
    fn dead_host(&self) -> String {
        format!(
            "unix://{}",
            self.stack.dir.path().join("dead.sock").display()
        )
    }

    /// `unix://` of a second path to the engine's socket, or `None` (said
    /// SKIPPED) when the engine under test is not reached through one.
    fn relay_host(&self) -> Option<String> {
        match relay_to_engine(self.stack.dir.path()) {
            Some(relay) => Some(format!("unix://{}", relay.display())),
            None => {
                skip_without_unix_engine();
                None
            }
        }
    }

    /// The Docker CLI on this configuration and nothing else.
    fn docker(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("docker");
        for variable in ENGINE_VARIABLES {
            cmd.env_remove(variable);
        }
        cmd.env("DOCKER_CONFIG", self.config.path())
            .envs(env.iter().copied())
            .args(args)
            .output()
            .expect("run docker")
    }

    #[track_caller]
    fn create(&self, name: &str, docker_endpoint: &str) {
        let out = self.docker(
            &["context", "create", name, "--docker", docker_endpoint],
            &[],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[track_caller]
    fn use_context(&self, name: &str) {
        let out = self.docker(&["context", "use", name], &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// devstack on this configuration with `env` (and no other engine variable).
    fn devstack(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_devstack"));
        for variable in ENGINE_VARIABLES {
            cmd.env_remove(variable);
        }
        cmd.current_dir(self.stack.dir.path())
            .args(args)
            .arg("--profile")
            .arg(&self.profile)
            .env("DEVSTACK_HOME", self.stack.dir.path().join("state"))
            .env("CI", "true")
            .env("DOCKER_CONFIG", self.config.path())
            .envs(env.iter().copied());
        Run::from(cmd.output().expect("run devstack"))
    }

    /// `doctor --json`'s docker check, and the run.
    fn doctor(&self, env: &[(&str, &str)]) -> (serde_json::Value, Run) {
        let run = self.devstack(&["doctor", "--json"], env);
        (doctor_check(&run.json(), "docker"), run)
    }

    fn config_json(&self) -> String {
        self.config.path().join("config.json").display().to_string()
    }
}

/// The real engine's socket: DOCKER_HOST's when it names one, else the
/// platform's. None when the engine is reached otherwise.
fn engine_socket() -> Option<PathBuf> {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => host.strip_prefix("unix://").map(PathBuf::from),
        _ => Some(PathBuf::from("/var/run/docker.sock")),
    }
}

/// A second path to the real engine: a symlink to its socket.
fn relay_to_engine(dir: &Path) -> Option<PathBuf> {
    let socket = engine_socket()?;
    let relay = dir.join("relay.sock");
    std::os::unix::fs::symlink(&socket, &relay).unwrap();
    Some(relay)
}

fn skip_without_unix_engine() -> bool {
    say_skipped("the engine under test is not reached through a unix socket (DOCKER_HOST)");
    false
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn a_context_from_config_json_or_docker_context_is_the_engine_devstack_reaches() {
    if !require_docker() {
        return;
    }
    let contexts = Contexts::new("ctx");
    let Some(relay_host) = contexts.relay_host() else {
        return;
    };
    let dead_host = contexts.dead_host();
    contexts.create("relay", &format!("host={relay_host}"));
    contexts.create("dead", &format!("host={dead_host}"));

    // `docker context use relay`: the current context in config.json.
    contexts.use_context("relay");
    let version = contexts.docker(&["version", "--format", "{{.Server.Version}}"], &[]);
    assert!(
        version.status.success(),
        "the CLI reaches the engine through the relay"
    );
    let (check, run) = contexts.doctor(&[]);
    assert_eq!(check["status"], "pass", "{}", run.all());
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.ends_with(&format!(
            " at {relay_host} (context `relay` from {})",
            contexts.config_json()
        )),
        "{detail}"
    );

    // DOCKER_CONTEXT beats config.json's currentContext.
    contexts.use_context("dead");
    let (check, run) = contexts.doctor(&[("DOCKER_CONTEXT", "relay")]);
    assert_eq!(check["status"], "pass", "{}", run.all());
    assert!(
        check["detail"].as_str().unwrap().ends_with(&format!(
            " at {relay_host} (context `relay` from DOCKER_CONTEXT)"
        )),
        "{check}"
    );

    // It went through the relay: without it, the same context fails.
    std::fs::remove_file(relay_host.trim_start_matches("unix://")).unwrap();
    let (check, _) = contexts.doctor(&[("DOCKER_CONTEXT", "relay")]);
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"].as_str().unwrap().starts_with(&format!(
            "cannot reach the Docker engine at {relay_host} (context `relay` from DOCKER_CONTEXT): "
        )),
        "{check}"
    );
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn a_context_at_a_dead_socket_fails_naming_it_and_the_way_out() {
    if !require_docker() {
        return;
    }
    let contexts = Contexts::new("ctxdead");
    let dead_host = contexts.dead_host();
    contexts.create("dead", &format!("host={dead_host}"));

    let (check, run) = contexts.doctor(&[("DOCKER_CONTEXT", "dead")]);
    assert_eq!(run.code, 3, "{}", run.all());
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"].as_str().unwrap().starts_with(&format!(
            "cannot reach the Docker engine at {dead_host} (context `dead` from DOCKER_CONTEXT): "
        )),
        "{check}"
    );
    let hint = check["hint"].as_str().unwrap();
    assert!(
        hint.contains("start the engine of context `dead`"),
        "{hint}"
    );
    assert!(
        hint.contains("set DOCKER_CONTEXT to another context (`docker context ls` lists them), or unset it to use the local socket"),
        "{hint}"
    );

    // The current context of config.json: the fix is `docker context use`.
    contexts.use_context("dead");
    let (check, run) = contexts.doctor(&[]);
    assert_eq!(run.code, 3, "{}", run.all());
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("(context `dead` from {})", contexts.config_json())),
        "{check}"
    );
    assert!(
        check["hint"]
            .as_str()
            .unwrap()
            .contains("`docker context use default`"),
        "{check}"
    );

    // Every command reaches the engine the same way.
    let run = contexts.devstack(&["localstack", "up"], &[]);
    assert_eq!(run.code, 3, "{}", run.all());
    assert!(
        run.stderr.contains(&format!(
            "error: cannot reach the Docker engine at {dead_host} (context `dead` from {})",
            contexts.config_json()
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("\nhint: start the engine of context `dead`"),
        "{}",
        run.stderr
    );
    assert!(contexts.stack.containers().is_empty());
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn docker_host_beats_docker_context() {
    if !require_docker() {
        return;
    }
    let contexts = Contexts::new("ctxhost");
    let Some(relay_host) = contexts.relay_host() else {
        return;
    };
    let dead_host = contexts.dead_host();
    contexts.create("dead", &format!("host={dead_host}"));
    contexts.create("relay", &format!("host={relay_host}"));

    let (check, run) = contexts.doctor(&[("DOCKER_HOST", &relay_host), ("DOCKER_CONTEXT", "dead")]);
    assert_eq!(check["status"], "pass", "{}", run.all());
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .ends_with(&format!(" at {relay_host} (DOCKER_HOST)")),
        "{check}"
    );

    // And the other way round: a context that answers does not rescue a
    // DOCKER_HOST that does not, as for the Docker CLI.
    let cli = contexts.docker(
        &["version"],
        &[("DOCKER_HOST", &dead_host), ("DOCKER_CONTEXT", "relay")],
    );
    assert!(
        !cli.status.success(),
        "the Docker CLI follows DOCKER_HOST too"
    );
    let (check, _) = contexts.doctor(&[("DOCKER_HOST", &dead_host), ("DOCKER_CONTEXT", "relay")]);
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .starts_with(&format!("cannot reach the Docker engine at {dead_host}: ")),
        "{check}"
    );
    assert_eq!(
        check["hint"].as_str().unwrap(),
        format!(
            "start the Docker engine at {dead_host}, or unset DOCKER_HOST to use context `relay` from DOCKER_CONTEXT"
        )
    );
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn an_unknown_context_is_an_error_naming_it() {
    if !require_docker() {
        return;
    }
    let contexts = Contexts::new("ctxnone");
    // The Docker CLI refuses it too.
    let cli = contexts.docker(&["version"], &[("DOCKER_CONTEXT", "nope")]);
    assert!(!cli.status.success());
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("context not found"),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );

    let (check, run) = contexts.doctor(&[("DOCKER_CONTEXT", "nope")]);
    assert_eq!(run.code, 3, "{}", run.all());
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("Docker context `nope` (from DOCKER_CONTEXT) does not exist: no "),
        "{detail}"
    );
    assert!(
        detail.contains(&contexts.config.path().display().to_string()),
        "{detail}"
    );
    assert!(
        check["hint"]
            .as_str()
            .unwrap()
            .contains("`docker context ls`"),
        "{check}"
    );

    // Every command that reaches the engine refuses it the same way.
    let run = contexts.devstack(&["localstack", "up"], &[("DOCKER_CONTEXT", "nope")]);
    assert_eq!(run.code, 3, "{}", run.all());
    assert!(
        run.stderr
            .contains("error: Docker context `nope` (from DOCKER_CONTEXT) does not exist: no "),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("\nhint: `docker context ls`"),
        "{}",
        run.stderr
    );
    assert!(contexts.stack.containers().is_empty());
}

/// The files of a TLS engine and its client, issued for this test.
struct Certificates {
    dir: tempfile::TempDir,
    /// The engine's certificate (DER) and its PKCS#8 key, for the relay.
    server: (rustls_pki_types::CertificateDer<'static>, Vec<u8>),
    ca: rustls_pki_types::CertificateDer<'static>,
}

impl Certificates {
    fn issue() -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let ca_params = |name: &str| {
            let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca.distinguished_name.push(DnType::CommonName, name);
            ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            ca.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            ca
        };
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let ca_params_signed = ca_params("devstack test engine CA");
        let ca_cert = ca_params_signed.self_signed(&ca_key).unwrap();
        write("ca.pem", ca_cert.pem());
        let issuer = Issuer::new(ca_params_signed, ca_key);
        let mut server = None;
        for (name, san, usage) in [
            ("server", "127.0.0.1", ExtendedKeyUsagePurpose::ServerAuth),
            (
                "client",
                "devstack-test-client",
                ExtendedKeyUsagePurpose::ClientAuth,
            ),
        ] {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(vec![san.to_string()]).unwrap();
            params.distinguished_name.push(DnType::CommonName, san);
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &issuer).unwrap();
            write(&format!("{name}.pem"), cert.pem());
            write(&format!("{name}-key.pem"), key.serialize_pem());
            if name == "server" {
                server = Some((cert.der().clone(), key.serialize_der()));
            }
        }
        // A CA that signed neither.
        let other_key = KeyPair::generate().unwrap();
        let other = ca_params("devstack test engine CA");
        write("other-ca.pem", other.self_signed(&other_key).unwrap().pem());
        Certificates {
            dir,
            server: server.unwrap(),
            ca: ca_cert.der().clone(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// A TLS engine: the real engine's socket behind a TLS listener on
/// 127.0.0.1 that demands a client certificate of the test CA, as
/// `dockerd --tlsverify` does. rustls, not socat: OpenSSL in socat's
/// `fork` mode fails the session resumption rustls clients attempt.
fn tls_engine(certs: &Certificates, socket: PathBuf) -> u16 {
    use rustls::server::WebPkiClientVerifier;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certs.ca.clone()).unwrap();
    let verifier =
        WebPkiClientVerifier::builder_with_provider(std::sync::Arc::new(roots), provider.clone())
            .build()
            .unwrap();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(certs.server.1.clone().into());
    let config = std::sync::Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![certs.server.0.clone()], key)
            .unwrap(),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Lives as long as the test process: each connection ends with its client.
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let (config, socket) = (config.clone(), socket.clone());
            std::thread::spawn(move || relay_tls(config, tcp, &socket));
        }
    });
    port
}

/// Copies one TLS connection to the engine's socket and back, polling each
/// side in turn (a rustls stream is one object for both directions).
fn relay_tls(
    config: std::sync::Arc<rustls::ServerConfig>,
    tcp: std::net::TcpStream,
    socket: &Path,
) -> std::io::Result<()> {
    use std::io::{ErrorKind, Read, Write};
    let poll = Some(Duration::from_millis(5));
    let mut engine = std::os::unix::net::UnixStream::connect(socket)?;
    engine.set_read_timeout(poll)?;
    tcp.set_read_timeout(poll)?;
    let connection = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    let idle = |e: &std::io::Error| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut);
    let mut buf = vec![0; 64 * 1024];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => engine.write_all(&buf[..n])?,
            Err(e) if idle(&e) => {}
            Err(e) => return Err(e),
        }
        match engine.read(&mut buf) {
            Ok(0) => {
                tls.conn.send_close_notify();
                return tls.flush();
            }
            Ok(n) => {
                tls.write_all(&buf[..n])?;
                tls.flush()?;
            }
            Err(e) if idle(&e) => {}
            Err(e) => return Err(e),
        }
    }
}

#[test]
#[ignore = "needs a Docker engine: make test-docker"]
fn a_context_with_tls_certificates_is_reached_over_verified_tls() {
    if !require_docker() {
        return;
    }
    let Some(socket) = engine_socket() else {
        skip_without_unix_engine();
        return;
    };
    let contexts = Contexts::new("ctxtls");
    let certs = Certificates::issue();
    let port = tls_engine(&certs, socket);
    let host = format!("tcp://127.0.0.1:{port}");
    contexts.create(
        "tls",
        &format!(
            "host={host},ca={},cert={},key={}",
            certs.path("ca.pem"),
            certs.path("client.pem"),
            certs.path("client-key.pem")
        ),
    );
    contexts.create(
        "wrong-ca",
        &format!(
            "host={host},ca={},cert={},key={}",
            certs.path("other-ca.pem"),
            certs.path("client.pem"),
            certs.path("client-key.pem")
        ),
    );
    contexts.create(
        "no-client-cert",
        &format!("host={host},ca={}", certs.path("ca.pem")),
    );
    // The Docker CLI reaches the engine through the context: the relay is sound.
    let cli = contexts.docker(&["version"], &[("DOCKER_CONTEXT", "tls")]);
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );

    let (check, run) = contexts.doctor(&[("DOCKER_CONTEXT", "tls")]);
    assert_eq!(check["status"], "pass", "{}", run.all());
    assert!(
        check["detail"].as_str().unwrap().ends_with(&format!(
            " at {host} over TLS (context `tls` from DOCKER_CONTEXT)"
        )),
        "{check}"
    );

    // The engine's certificate is verified, and the client's is sent.
    for refused in ["wrong-ca", "no-client-cert"] {
        let (check, _) = contexts.doctor(&[("DOCKER_CONTEXT", refused)]);
        assert_eq!(check["status"], "fail", "{check}");
        assert!(
            check["detail"].as_str().unwrap().starts_with(&format!(
                "cannot reach the Docker engine at {host} (context `{refused}` from DOCKER_CONTEXT): "
            )),
            "{check}"
        );
    }

    // DOCKER_HOST with DOCKER_TLS_VERIFY and DOCKER_CERT_PATH, as the CLI reads them.
    let certs_dir = tempfile::tempdir().unwrap();
    for (from, to) in [
        ("ca.pem", "ca.pem"),
        ("client.pem", "cert.pem"),
        ("client-key.pem", "key.pem"),
    ] {
        std::fs::copy(certs.dir.path().join(from), certs_dir.path().join(to)).unwrap();
    }
    let cert_path = certs_dir.path().display().to_string();
    let (check, run) = contexts.doctor(&[
        ("DOCKER_HOST", &host),
        ("DOCKER_TLS_VERIFY", "1"),
        ("DOCKER_CERT_PATH", &cert_path),
    ]);
    assert_eq!(check["status"], "pass", "{}", run.all());
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .ends_with(&format!(" at {host} over TLS (DOCKER_HOST)")),
        "{check}"
    );
}
