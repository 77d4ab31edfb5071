//! The `up --timings` page in a real browser: headless Chromium renders the
//! waterfall of a recorded `up --json` run (tests/fixtures/up-timings.json,
//! the ci profile on K3s), and every step and part is on the page, drawn.
//! Without Chromium the test prints `SKIPPED` (scripts/setup-browser.sh
//! installs it).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use devstack::timeline::{self, Span};

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"]
        .iter()
        .find_map(|name| which::which(name).ok())
}

/// Runs Chromium headless on `page` with `args`, bounded so that a hung
/// browser fails the test instead of hanging it.
fn run_chromium(browser: &Path, profile: &Path, page: &Path, args: &[&str]) -> Vec<u8> {
    let url = format!("file://{}", page.display());
    let out = Command::new("timeout")
        .arg("120")
        .arg(browser)
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--hide-scrollbars",
            "--no-first-run",
            // Its own profile, so that parallel runs do not share one.
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(args)
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// What the DOM serialiser writes for a text node.
fn dom_text(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes)
/// into (width, height, pixels as RGB).
fn decode_png(bytes: &[u8]) -> (usize, usize, Vec<[u8; 3]>) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let (mut at, mut idat) = (8, Vec::new());
    let (mut width, mut height, mut channels) = (0, 0, 0);
    while at + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let kind = &bytes[at + 4..at + 8];
        let data = &bytes[at + 8..at + 8 + len];
        match kind {
            b"IHDR" => {
                width = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
                height = u32::from_be_bytes(data[4..8].try_into().unwrap()) as usize;
                assert_eq!(data[8], 8, "bit depth");
                channels = match data[9] {
                    2 => 3,
                    6 => 4,
                    other => panic!("PNG colour type {other}"),
                };
                assert_eq!(data[12], 0, "interlaced");
            }
            b"IDAT" => idat.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        at += 12 + len;
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(&idat[..])
        .read_to_end(&mut raw)
        .expect("inflate");
    let stride = width * channels;
    assert_eq!(raw.len(), height * (stride + 1), "scanline data");
    let mut pixels = Vec::with_capacity(width * height);
    let mut prev = vec![0u8; stride];
    for row in raw.chunks(stride + 1) {
        let (filter, line) = (row[0], &row[1..]);
        let mut cur = vec![0u8; stride];
        for i in 0..stride {
            let a = if i >= channels { cur[i - channels] } else { 0 };
            let b = prev[i];
            let c = if i >= channels { prev[i - channels] } else { 0 };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((a as u16 + b as u16) / 2) as u8,
                4 => {
                    let p = a as i16 + b as i16 - c as i16;
                    let (pa, pb, pc) = (
                        (p - a as i16).abs(),
                        (p - b as i16).abs(),
                        (p - c as i16).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                other => panic!("PNG filter {other}"),
            };
            cur[i] = line[i].wrapping_add(predicted);
        }
        pixels.extend(cur.chunks(channels).map(|p| [p[0], p[1], p[2]]));
        prev = cur;
    }
    (width, height, pixels)
}

#[test]
fn chromium_renders_every_step_of_a_recorded_run() {
    let Some(browser) = chromium() else {
        println!(
            "SKIPPED: chromium_renders_every_step_of_a_recorded_run: no chromium on PATH (scripts/setup-browser.sh installs it)"
        );
        return;
    };
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/up-timings.json");
    let spans: Vec<Span> =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    assert!(spans.len() > 10, "the fixture is a whole run");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("up.html");
    let end = spans.iter().filter_map(|s| s.end_ms).max().unwrap();
    std::fs::write(&page, timeline::html("devstack up `tl`", &spans, end)).unwrap();

    let dom = String::from_utf8(run_chromium(
        &browser,
        &dir.path().join("profile-dom"),
        &page,
        &["--dump-dom"],
    ))
    .unwrap();
    assert!(dom.contains("<svg"), "no SVG in the rendered DOM");
    for span in &spans {
        let label = format!(">{}</text>", dom_text(&span.name));
        assert!(dom.contains(&label), "{:?} is not on the page", span.name);
    }
    let bars =
        dom.matches("<rect class=\"step\"").count() + dom.matches("<rect class=\"part\"").count();
    assert_eq!(bars, spans.len(), "one bar per step and part");

    let shot = dir.path().join("up.png");
    run_chromium(
        &browser,
        &dir.path().join("profile-shot"),
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1260,620",
        ],
    );
    let (width, height, pixels) = decode_png(&std::fs::read(&shot).expect("a screenshot"));
    assert_eq!((width, height), (1260, 620));
    let colours: std::collections::HashSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(
        colours.len() > 20,
        "the screenshot is all but blank: {} colour(s)",
        colours.len()
    );
    // The bars themselves are drawn: both fills, as the page's own style
    // sheet gives them, cover many pixels.
    let html = std::fs::read_to_string(&page).unwrap();
    for what in ["step", "part"] {
        let rgb = fill_of(&html, what);
        let n = pixels.iter().filter(|p| **p == rgb).count();
        assert!(
            n > 500,
            "{what} bars: {n} pixel(s) of their colour {rgb:02x?}"
        );
    }
}

/// The fill the page's style sheet gives class `class` (`.step{fill:#0969da}`),
/// as RGB: the colours come from timeline::html, not from a copy here.
fn fill_of(html: &str, class: &str) -> [u8; 3] {
    let rule = format!(".{class}{{fill:#");
    let at = html
        .find(&rule)
        .unwrap_or_else(|| panic!("no `{rule}…}}` rule in the page's style sheet"))
        + rule.len();
    let hex = &html[at..at + 6];
    assert_eq!(
        html.as_bytes().get(at + 6),
        Some(&b'}'),
        "`.{class}` fill is not #rrggbb: {}",
        &html[at..(at + 12).min(html.len())]
    );
    let channel = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap();
    [channel(0), channel(2), channel(4)]
}
