//! No secret in any output: one run of every command that can carry one
//! (upload, download, watch and bench; through the relay and `--direct`;
//! interrupted by Ctrl-C or by a relay that stays away, so the rerun command
//! is printed; refused, mistyped, asked for `--help`; `--json` and
//! `--json-lines`), with distinctive secrets (the relay token, the account
//! key, a SAS signature, an Entra ID federated credential and the access
//! tokens it buys), every client at `RELAY_LOG=trace` and the relay-server
//! binary at trace too. None of the secrets may appear in any stdout, stderr,
//! log or file the runs leave (the watch journal, the path cache, the relay's
//! state), and no SAS signature at all other than as `sig=REDACTED`.
//!
//! Deterministic: each Ctrl-C is sent while the fault proxy holds a storage
//! request, and each watch is stopped after it reported its commit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use relay_tests::azurite::shared_azurite;
use relay_tests::blobs::new_container;
use relay_tests::entra_issuer::{AUDIENCE, Issuer, TENANT};
use relay_tests::entra_sts::Principal;
use relay_tests::files::{Scratch, write_random};
use relay_tests::outputs::{Seen, interrupted, watched_until_commit};
use relay_tests::proxy::{FaultProxy, Op, Schedule};
use relay_tests::{DEV_ACCOUNT, DEV_KEY, Reaped, binary, reserved_port, run_client};

const T: Duration = Duration::from_secs(180);
const MIB: u64 = 1 << 20;
const TOKEN: &str = "tok-SECRET-relay-7f3a9c1e5b2d4068";
const WRONG_TOKEN: &str = "tok-SECRET-wrong-0c9d8e7f6a5b4c3d";
const ASSERTION: &str = "federated-SECRET-assertion-5e4d3c2b1a09";
/// In the environment of `--help` runs only.
const HELP_KEY: &str = "a2V5LVNFQ1JFVC1mb3ItaGVscC0wMTIzNDU2Nzg5";
const HELP_SIG: &str = "SIG-SECRET-for-help-4b3a2918";

fn a(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// An account SAS for the development account, and its signature.
fn sas() -> (String, String) {
    let q = relay_storage::sas::account_sas(
        DEV_ACCOUNT,
        DEV_KEY,
        time::OffsetDateTime::now_utc(),
        time::Duration::hours(2),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let sig = url::form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "sig")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    (q, sig)
}

/// Everything the runs share, and what they left.
struct Lab {
    dir: Scratch,
    env: Vec<(String, String)>,
    c: String,
    /// `--relay ADDR --relay-cert-sha256 FP`.
    via: Vec<String>,
    /// `via` and `--token TOKEN`.
    relay: Vec<String>,
    sas_q: String,
    sig: String,
    azurite: SocketAddr,
    issuer: Issuer,
    seen: Seen,
    /// The relay-server binary, killed when dropped.
    _relay: Reaped,
}

impl Lab {
    async fn start(relay_proxy: &FaultProxy) -> Self {
        let az = shared_azurite();
        let c = new_container("secrets").await;
        let dir = Scratch::new("secrets");
        let (sas_q, sig) = sas();
        let issuer = Issuer::start().await;
        issuer.sts.set(Principal {
            roles: vec!["Uploader.lab".into()],
            assertion: ASSERTION.into(),
            ..Principal::default()
        });
        let storage = format!("{}?{sas_q}", relay_proxy.url());
        let (child, addr, fingerprint) = start_relay(&dir, &storage, &c, &issuer);
        let via = a(&["--relay", &addr, "--relay-cert-sha256", &fingerprint]);
        let env = [
            ("RELAY_LOG", "trace".to_string()),
            (
                "RELAY_PATH_CACHE",
                dir.path("paths.json").display().to_string(),
            ),
            (
                "RELAY_ID_KEY_FILE",
                dir.path("direct.key").display().to_string(),
            ),
        ];
        Self {
            env: env.into_iter().map(|(k, v)| (k.into(), v)).collect(),
            relay: [via.clone(), a(&["--token", TOKEN])].concat(),
            via,
            c,
            dir,
            sas_q,
            sig,
            azurite: SocketAddr::from(([127, 0, 0, 1], az.port)),
            issuer,
            seen: Seen::default(),
            _relay: Reaped(child),
        }
    }

    fn env_with(&self, extra: &[(String, String)]) -> Vec<(String, String)> {
        [self.env.clone(), extra.to_vec()].concat()
    }

    /// Runs the client with `args` (and `extra` environment), keeps its output.
    async fn run_with(
        &mut self,
        label: &str,
        args: &[String],
        extra: &[(String, String)],
    ) -> Output {
        let env = self.env_with(extra);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let out = run_client(args, &env, T).await;
        self.seen.output(label, &out);
        out
    }

    async fn run(&mut self, label: &str, args: &[String]) -> Output {
        self.run_with(label, args, &[]).await
    }

    /// `run`, which must succeed.
    async fn ok(&mut self, label: &str, args: &[String], extra: &[(String, String)]) {
        let out = self.run_with(label, args, extra).await;
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{label}: {said}");
    }

    /// A run interrupted by Ctrl-C while `proxy` holds a request of `op`.
    async fn ctrl_c(&mut self, label: &str, args: &[String], proxy: &FaultProxy, op: Op) -> String {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let out = interrupted(args, &env, proxy, op, T).await;
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(130), "{label}: {said}");
        self.seen.output(label, &out);
        said
    }

    async fn watch(&mut self, label: &str, args: &[String]) {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let out = watched_until_commit(args, &env, T).await;
        self.seen.output(label, &out);
    }

    fn path(&self, name: &str) -> String {
        self.dir.path(name).display().to_string()
    }

    /// A folder of a one-block file and a three-block one.
    fn folder(&self, name: &str, seed: u64) -> String {
        let root: PathBuf = self.dir.path(name);
        write_random(&root.join("small.txt"), 3000, seed);
        write_random(&root.join("big.bin"), 11 * MIB, seed + 1);
        root.display().to_string()
    }

    /// What workload identity's webhook sets, the stand-in as the authority.
    fn workload_identity(&self) -> Vec<(String, String)> {
        std::fs::write(self.dir.path("federated"), ASSERTION).unwrap_or_else(|e| panic!("{e}"));
        let ca = self.dir.path("issuer-ca.pem");
        std::fs::write(&ca, &self.issuer.ca_pem).unwrap_or_else(|e| panic!("{e}"));
        [
            ("AZURE_AUTHORITY_HOST", self.issuer.authority()),
            ("AZURE_TENANT_ID", TENANT.to_string()),
            ("AZURE_CLIENT_ID", self.issuer.sts.principal().client_id),
            ("AZURE_FEDERATED_TOKEN_FILE", self.path("federated")),
            ("SSL_CERT_FILE", ca.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The relay-server binary at trace level (its log in `dir/relay.log`),
/// storage at `storage_url` (a SAS in it), accepting the tokens file's token
/// and the stand-in issuer's Entra ID tokens: (process, address, pin).
fn start_relay(
    dir: &Scratch,
    storage_url: &str,
    container: &str,
    issuer: &Issuer,
) -> (std::process::Child, String, String) {
    std::fs::write(dir.path("tokens"), format!("{TOKEN} {container}:rw\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path("entra-ca.pem"), &issuer.ca_pem).unwrap_or_else(|e| panic!("{e}"));
    let addr = format!("127.0.0.1:{}", reserved_port());
    let health = format!("127.0.0.1:{}", reserved_port());
    let log = std::fs::File::create(dir.path("relay.log")).unwrap_or_else(|e| panic!("{e}"));
    let child = std::process::Command::new(binary("relay-server"))
        .env("RELAY_LISTEN", &addr)
        .env("RELAY_STORAGE_URL", storage_url)
        .env("RELAY_TOKENS", dir.path("tokens"))
        .env("RELAY_STATE_DIR", dir.path("state"))
        .env("RELAY_ID_KEY_FILE", dir.path("state/id.key"))
        .env("RELAY_CERT_FINGERPRINT_FILE", dir.path("state/fingerprint"))
        .env("RELAY_HEALTH_LISTEN", &health)
        .env("RELAY_ENTRA_AUDIENCE", AUDIENCE)
        .env("RELAY_ENTRA_TENANT", TENANT)
        .env("RELAY_ENTRA_ISSUER", issuer.issuer())
        .env("RELAY_ENTRA_AUTHORITY", issuer.authority())
        .env("RELAY_ENTRA_CA_FILE", dir.path("entra-ca.pem"))
        .env("RELAY_ENTRA_GRANT", format!("Uploader.lab={container}:rw"))
        .env("RELAY_LOG", "trace")
        .env_remove("RELAY_ACCOUNT_KEY")
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("relay-server: {e}"));
    let t0 = std::time::Instant::now();
    while relay_tests::http::get(&health, "/healthz").is_none() {
        assert!(t0.elapsed() < T, "the relay never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let fingerprint = std::fs::read_to_string(dir.path("state/fingerprint"))
        .unwrap_or_default()
        .trim()
        .to_string();
    (child, addr, fingerprint)
}

/// Through the relay: upload, its rerun, download, watch, a wrong token, a
/// relay that stays away past `--patience`, Entra ID sign-in.
async fn through_the_relay(lab: &mut Lab) {
    let (c, relay, via) = (lab.c.clone(), lab.relay.clone(), lab.via.clone());
    let src = lab.folder("src", 1);
    let upload = [a(&["upload", &src, "--to", &c, "--json"]), relay.clone()].concat();
    lab.ok("upload via relay", &upload, &[]).await;
    let eq_token = format!("--token={TOKEN}");
    let again = [
        a(&["upload", &src, "--to", &c, "--json-lines", &eq_token]),
        via.clone(),
    ]
    .concat();
    lab.ok("upload rerun via relay", &again, &[]).await;
    let to = lab.path("dl-relay");
    let down = [
        a(&["download", &format!("{c}/src"), "--to", &to, "--json"]),
        relay.clone(),
    ];
    lab.ok("download via relay", &down.concat(), &[]).await;
    let (watched, journal) = (lab.folder("watched", 5), lab.path("journal.db"));
    let w = a(&[
        "watch",
        &watched,
        "--to",
        &format!("{c}/w"),
        "--settle",
        "0.3",
        "--json-lines",
    ]);
    let w = [w, a(&["--journal", &journal]), relay.clone()].concat();
    lab.watch("watch via relay", &w).await;
    let wrong = [via.clone(), a(&["--token", WRONG_TOKEN])].concat();
    for json in [&[][..], &["--json"][..]] {
        let args = [a(&["upload", &src, "--to", &c]), a(json), wrong.clone()].concat();
        lab.run(&format!("a wrong token {json:?}"), &args).await;
    }
    let away = format!("127.0.0.1:{}", reserved_port());
    let args = a(&[
        "upload",
        &src,
        "--to",
        &c,
        "--relay",
        &away,
        "--insecure",
        "--patience",
        "1s",
        "--token",
        TOKEN,
    ]);
    let out = lab.run("relay away past --patience", &args).await;
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Signed in with Entra ID (workload identity).
    let wi = lab.workload_identity();
    let entra = [
        via.clone(),
        a(&["--entra", "workload-identity", "--entra-scope", AUDIENCE]),
    ]
    .concat();
    let up = [
        a(&["upload", &src, "--to", &format!("{c}/entra"), "--json"]),
        entra.clone(),
    ];
    lab.ok("upload signed in with Entra ID", &up.concat(), &wi)
        .await;
    let to = lab.path("dl-entra");
    let down = [
        a(&["download", &format!("{c}/entra"), "--to", &to, "--json"]),
        entra,
    ];
    lab.ok("download signed in with Entra ID", &down.concat(), &wi)
        .await;
    assert!(
        lab.issuer.sts.issued() > 0,
        "no Entra ID token was asked for"
    );
}

/// Direct mode by SAS and by account key: upload, download, watch, bench.
async fn direct(lab: &mut Lab, sas_url: &str) {
    let c = lab.c.clone();
    let src = lab.folder("src-direct", 11);
    let key = a(&[
        "--storage-url",
        &shared_azurite().url(),
        "--account-key",
        DEV_KEY,
    ]);
    let by_sas = a(&["--direct", "--storage-url", sas_url]);
    let by_key = [a(&["--direct"]), key.clone()].concat();
    for (how, flags) in [("sas", &by_sas), ("key", &by_key)] {
        let dest = format!("{c}/d-{how}");
        let up = [a(&["upload", &src, "--to", &dest, "--json"]), flags.clone()].concat();
        lab.ok(&format!("upload direct by {how}"), &up, &[]).await;
        let to = lab.path(&format!("dl-{how}"));
        let down = [
            a(&["download", &dest, "--to", &to, "--json-lines"]),
            flags.clone(),
        ]
        .concat();
        lab.ok(&format!("download direct by {how}"), &down, &[])
            .await;
    }
    let watched = lab.folder("watched-direct", 7);
    let w = a(&[
        "watch",
        &watched,
        "--to",
        &format!("{c}/wd"),
        "--settle",
        "0.3",
        "--json-lines",
    ]);
    let w = [w, a(&["--no-journal"]), by_sas.clone()].concat();
    lab.watch("watch direct by SAS", &w).await;
    let bench = a(&[
        "bench",
        "--large-size",
        "6MiB",
        "--small-count",
        "2",
        "--small-size",
        "3KiB",
        "--json",
        "--token",
        TOKEN,
    ]);
    let bench = [bench, lab.via.clone()].concat();
    let up = [bench.clone(), a(&["--to", &format!("{c}/bench")]), key].concat();
    lab.ok("bench by key", &up, &[]).await;
    let down = [bench, a(&["--download", "--to", &format!("{c}/benchdl")])].concat();
    let down = [down, a(&["--storage-url", sas_url])].concat();
    lab.ok("bench --download by SAS", &down, &[]).await;
}

/// Ctrl-C through the relay (a Put Block held), direct by SAS (a Put Block
/// held), and in a direct download by SAS (a Get Blob held): each prints the
/// command that resumes.
async fn interrupted_runs(lab: &mut Lab, relay_proxy: &FaultProxy) {
    let c = lab.c.clone();
    let big = lab.dir.path("big");
    write_random(&big.join("big.bin"), 11 * MIB, 9);
    let big = big.display().to_string();
    let up = |to: &str| {
        a(&[
            "upload",
            &big,
            "--to",
            &format!("{c}/{to}"),
            "--block-size",
            "5MiB",
        ])
    };
    let args = [up("cc"), lab.relay.clone()].concat();
    lab.ctrl_c("Ctrl-C via relay", &args, relay_proxy, Op::PutBlock)
        .await;
    let proxy = FaultProxy::start(lab.azurite, Schedule::seeded(2)).await;
    let sas_url = format!("{}?{}", proxy.url(), lab.sas_q);
    let args = [up("ccd"), a(&["--direct", "--storage-url", &sas_url])].concat();
    let said = lab
        .ctrl_c("Ctrl-C direct by SAS", &args, &proxy, Op::PutBlock)
        .await;
    assert!(
        said.contains("sig=REDACTED") && said.contains("put yours back"),
        "{said}"
    );
    let proxy = FaultProxy::start(lab.azurite, Schedule::seeded(3)).await;
    let sas_url = format!("--storage-url={}?{}", proxy.url(), lab.sas_q);
    let to = lab.path("dl-cc");
    let args = a(&[
        "download",
        &format!("{c}/src"),
        "--to",
        &to,
        "--direct",
        &sas_url,
    ]);
    let said = lab
        .ctrl_c("Ctrl-C download by SAS", &args, &proxy, Op::GetBlob)
        .await;
    assert!(said.contains("sig=REDACTED"), "{said}");
}

/// Errors that quote a URL (a wrong signature, storage unreachable, a URL
/// that does not parse, a SAS where none belongs), a usage error, `--help`
/// with secrets in the environment; the relay's own.
async fn errors_and_help(lab: &mut Lab, sas_url: &str) {
    let (c, sas_q, az) = (lab.c.clone(), lab.sas_q.clone(), shared_azurite().url());
    let src = lab.folder("src-errors", 21);
    let wrong = format!("sig={}", urlencode(&lab.sig));
    let bad_sig = format!(
        "{az}?{}",
        sas_q.replace(&wrong, "sig=AAAA0wrong0SECRET0sig%3D")
    );
    let closed = format!("http://127.0.0.1:{}/{DEV_ACCOUNT}?{sas_q}", reserved_port());
    let unparsable = format!("http://127.0.0.1:99999/{DEV_ACCOUNT}?{sas_q}");
    for (what, url) in [
        ("bad sig", &bad_sig),
        ("closed", &closed),
        ("unparsable", &unparsable),
    ] {
        for json in [&[][..], &["--json"][..]] {
            let args = a(&["upload", &src, "--to", &c, "--direct", "--storage-url", url]);
            let out = lab
                .run(&format!("{what} {json:?}"), &[args, a(json)].concat())
                .await;
            assert!(!out.status.success(), "{what}");
        }
    }
    let by_sas = a(&["--direct", "--storage-url", sas_url]);
    let sas_to = format!("{az}/{c}?{sas_q}");
    let args = [
        a(&["upload", &src, "--to", &sas_to, "--json"]),
        by_sas.clone(),
    ]
    .concat();
    lab.run("a SAS in --to", &args).await;
    let source = format!("https://{DEV_ACCOUNT}.blob.core.windows.net/{c}/src?{sas_q}");
    let args = [a(&["download", &source, "--to", &lab.path("x")]), by_sas].concat();
    lab.run("a SAS in a source", &args).await;
    let args = [
        a(&["upload", &src, "--json", "--no-such-flag", "--to", &c]),
        lab.relay.clone(),
    ];
    lab.run("a usage error", &args.concat()).await;
    // Help shows each flag's environment variable, never the value in it.
    let fake_url = format!("https://acct.blob.core.windows.net/?sv=1&sig={HELP_SIG}");
    let secret_env: Vec<(String, String)> = [
        ("RELAY_TOKEN", TOKEN),
        ("RELAY_ACCOUNT_KEY", HELP_KEY),
        ("RELAY_STORAGE_URL", &fake_url),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for command in ["upload", "download", "watch", "bench"] {
        let label = format!("{command} --help");
        lab.run_with(&label, &a(&[command, "--help"]), &secret_env)
            .await;
    }
    let server = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(binary("relay-server"));
        cmd.args(args).env_remove("RELAY_ACCOUNT_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap_or_else(|e| panic!("{e}"))
    };
    let help = server(
        &["--help"],
        &[
            ("RELAY_STORAGE_URL", &fake_url),
            ("RELAY_ACCOUNT_KEY", HELP_KEY),
        ],
    );
    // Its examples quote Azurite's well-known development key: public, and
    // not a key anyone gave it.
    let text = String::from_utf8_lossy(&help.stdout).replace(DEV_KEY, "(Azurite's key)");
    lab.seen.text("relay-server --help: stdout", &text);
    let (tokens, state) = (lab.path("tokens"), lab.path("state2"));
    let env = [
        ("RELAY_STORAGE_URL", unparsable.as_str()),
        ("RELAY_TOKENS", &tokens),
        ("RELAY_ID_KEY_EPHEMERAL", "true"),
        ("RELAY_STATE_DIR", &state),
    ];
    let out = server(&[], &env);
    assert!(!out.status.success());
    lab.seen
        .output("relay-server, an unparsable storage URL", &out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_any_output() {
    let azurite = SocketAddr::from(([127, 0, 0, 1], shared_azurite().port));
    // The relay reaches storage through a proxy that can hold a request.
    let relay_proxy = FaultProxy::start(azurite, Schedule::seeded(1)).await;
    let mut lab = Lab::start(&relay_proxy).await;
    let direct_proxy = FaultProxy::start(azurite, Schedule::seeded(4)).await;
    let sas_url = format!("{}?{}", direct_proxy.url(), lab.sas_q);
    through_the_relay(&mut lab).await;
    direct(&mut lab, &sas_url).await;
    interrupted_runs(&mut lab, &relay_proxy).await;
    errors_and_help(&mut lab, &sas_url).await;

    let Lab {
        dir,
        mut seen,
        sig,
        _relay,
        ..
    } = lab;
    drop(_relay);
    seen.files("relay", &dir.path("relay.log"));
    seen.files("relay state", &dir.path("state"));
    seen.files("watch journal", &dir.path("journal.db"));
    seen.files("path cache", &dir.path("paths.json"));
    // The logs looked at are the most detailed there are.
    assert!(
        seen.any("relay: ", " TRACE "),
        "the relay did not log at trace"
    );
    assert!(
        seen.any("upload via relay: stderr", " TRACE "),
        "no client trace"
    );
    assert!(seen.len() > 60, "only {} outputs seen", seen.len());
    let leaks = seen.leaks(&[
        ("the relay token", TOKEN.to_string()),
        ("a wrong relay token", WRONG_TOKEN.to_string()),
        ("the account key", DEV_KEY.to_string()),
        ("part of the account key", DEV_KEY[..24].to_string()),
        ("the SAS signature", sig.clone()),
        ("the SAS signature, percent-encoded", urlencode(&sig)),
        ("part of the SAS signature", sig[..16].to_string()),
        ("the federated credential", ASSERTION.to_string()),
        ("the account key in the environment", HELP_KEY.to_string()),
        ("the SAS signature in the environment", HELP_SIG.to_string()),
        ("an Entra ID access token", "eyJ".to_string()),
    ]);
    assert!(leaks.is_empty(), "secrets in output:\n{}", leaks.join("\n"));
}
