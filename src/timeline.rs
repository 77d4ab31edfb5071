//! When each step of a run started and ended, relative to the start of the
//! run, with sub-steps under their step: what `up --json` reports as
//! `timings` and `up --timings FILE.html` draws as a waterfall.
//!
//! A base-layer module so that a [`crate::ui::Step`] can carry its span and
//! the code deep inside a step (image loads, node Ready) can time its parts
//! without knowing who records them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

/// One timed piece of a run. Times are milliseconds since the run started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Span {
    pub id: usize,
    pub name: String,
    /// The step this is a part of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<usize>,
    pub start_ms: u64,
    /// `None`: still running when the timeline was read (the run failed or
    /// was interrupted inside it).
    #[serde(default)]
    pub end_ms: Option<u64>,
    /// `None` while running, or for spans read from elsewhere (pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
}

impl Span {
    pub fn duration_ms(&self) -> Option<u64> {
        self.end_ms.map(|end| end.saturating_sub(self.start_ms))
    }
}

struct Inner {
    origin: Instant,
    /// The wall clock at `origin`, to place times read from elsewhere (a
    /// pod's conditions) on the run's axis.
    wall: SystemTime,
    spans: Vec<Span>,
}

/// A shared recorder: clones record into the same timeline.
#[derive(Clone)]
pub struct Timeline {
    inner: Arc<Mutex<Inner>>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeline")
            .field("spans", &self.spans().len())
            .finish()
    }
}

impl Timeline {
    /// A timeline whose run starts now.
    pub fn new() -> Self {
        Timeline {
            inner: Arc::new(Mutex::new(Inner {
                origin: Instant::now(),
                wall: SystemTime::now(),
                spans: Vec::new(),
            })),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut inner)
    }

    /// Starts the run again: no spans, the origin now.
    pub fn restart(&self) {
        self.with(|inner| {
            inner.origin = Instant::now();
            inner.wall = SystemTime::now();
            inner.spans.clear();
        });
    }

    /// Milliseconds from the start of the run to `at` (0 before it).
    pub fn ms_at(&self, at: Instant) -> u64 {
        self.with(|inner| at.saturating_duration_since(inner.origin).as_millis() as u64)
    }

    /// Milliseconds from the start of the run to a wall-clock time (0 before it).
    pub fn ms_at_wall(&self, at: SystemTime) -> u64 {
        self.with(|inner| {
            at.duration_since(inner.wall)
                .unwrap_or(Duration::ZERO)
                .as_millis() as u64
        })
    }

    /// Starts a span now; [`Timeline::end`] ends it.
    pub fn start(&self, name: impl Into<String>, parent: Option<usize>) -> usize {
        let now = self.ms_at(Instant::now());
        self.push(name.into(), parent, now, None, None)
    }

    /// Ends a span now (once: a second end keeps the first).
    pub fn end(&self, id: usize, ok: bool) {
        let now = self.ms_at(Instant::now());
        self.with(|inner| {
            if let Some(span) = inner.spans.iter_mut().find(|s| s.id == id)
                && span.end_ms.is_none()
            {
                span.end_ms = Some(now);
                span.ok = Some(ok);
            }
        });
    }

    /// Ends a span at a time already past, in milliseconds since the start
    /// (a pod's Ready read off its conditions; never before the span's
    /// start). Once, as [`Timeline::end`].
    pub fn end_at(&self, id: usize, end_ms: u64, ok: bool) {
        self.with(|inner| {
            if let Some(span) = inner.spans.iter_mut().find(|s| s.id == id)
                && span.end_ms.is_none()
            {
                span.end_ms = Some(end_ms.max(span.start_ms));
                span.ok = Some(ok);
            }
        });
    }

    /// Records a span that already happened, in milliseconds since the start.
    pub fn record(
        &self,
        name: impl Into<String>,
        parent: Option<usize>,
        start_ms: u64,
        end_ms: Option<u64>,
        ok: Option<bool>,
    ) -> usize {
        self.push(name.into(), parent, start_ms, end_ms, ok)
    }

    fn push(
        &self,
        name: String,
        parent: Option<usize>,
        start_ms: u64,
        end_ms: Option<u64>,
        ok: Option<bool>,
    ) -> usize {
        self.with(|inner| {
            let id = inner.spans.len();
            inner.spans.push(Span {
                id,
                name,
                parent,
                start_ms,
                end_ms,
                ok,
            });
            id
        })
    }

    /// A span that ends when the guard is finished or dropped.
    pub fn span(&self, name: impl Into<String>, parent: Option<usize>) -> SpanGuard {
        SpanGuard {
            timeline: Some(self.clone()),
            id: self.start(name, parent),
        }
    }

    pub fn spans(&self) -> Vec<Span> {
        self.with(|inner| inner.spans.clone())
    }

    /// Milliseconds since the start of the run.
    pub fn now_ms(&self) -> u64 {
        self.ms_at(Instant::now())
    }
}

/// Ends its span: [`SpanGuard::finish`] with the outcome, or on drop as
/// failed (the work was abandoned or returned early with an error).
pub struct SpanGuard {
    timeline: Option<Timeline>,
    id: usize,
}

impl SpanGuard {
    /// A guard that records nothing (no timeline attached).
    pub fn none() -> Self {
        SpanGuard {
            timeline: None,
            id: 0,
        }
    }

    pub fn id(&self) -> Option<usize> {
        self.timeline.as_ref().map(|_| self.id)
    }

    /// Ends the span with the outcome of `result`, and passes it on.
    pub fn finish<T, E>(mut self, result: Result<T, E>) -> Result<T, E> {
        if let Some(timeline) = self.timeline.take() {
            timeline.end(self.id, result.is_ok());
        }
        result
    }
}

impl Drop for SpanGuard {
    fn drop(&mut self) {
        if let Some(timeline) = self.timeline.take() {
            timeline.end(self.id, false);
        }
    }
}

/// Spans in drawing order: each step followed by its parts (depth first,
/// siblings by start), with the depth of each.
pub fn ordered(spans: &[Span]) -> Vec<(usize, &Span)> {
    fn visit<'a>(
        spans: &'a [Span],
        parent: Option<usize>,
        depth: usize,
        out: &mut Vec<(usize, &'a Span)>,
    ) {
        let mut children: Vec<&Span> = spans
            .iter()
            .filter(|s| {
                s.parent == parent
                    // A parent that is not in the list: draw it at the top.
                    || (parent.is_none()
                        && s.parent.is_some_and(|p| !spans.iter().any(|o| o.id == p)))
            })
            .collect();
        children.sort_by_key(|s| (s.start_ms, s.id));
        for child in children {
            out.push((depth, child));
            visit(spans, Some(child.id), depth + 1, out);
        }
    }
    let mut out = Vec::new();
    visit(spans, None, 0, &mut out);
    out
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn seconds(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// A self-contained HTML page (inline SVG and CSS, nothing fetched) with
/// every span as a bar on a time axis. Spans still open end at `now_ms`
/// and are marked unfinished. Only names and times are drawn, so the page
/// holds what the run's progress lines held, never a secret value.
pub fn html(title: &str, spans: &[Span], now_ms: u64) -> String {
    const LABEL_W: f64 = 360.0;
    const CHART_W: f64 = 760.0;
    const ROW_H: f64 = 22.0;
    const TOP: f64 = 34.0;
    let rows = ordered(spans);
    let total = rows
        .iter()
        .map(|(_, s)| s.end_ms.unwrap_or(now_ms).max(s.start_ms))
        .max()
        .unwrap_or(0)
        .max(now_ms.min(1))
        .max(1);
    let x = |ms: u64| LABEL_W + (ms as f64 / total as f64) * CHART_W;
    let height = TOP + rows.len() as f64 * ROW_H + 16.0;
    let width = LABEL_W + CHART_W + 90.0;
    let mut svg = String::new();
    svg.push_str(&format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"{}\">\n",
        escape(title)
    ));
    // The time axis: a tick every "nice" interval, about ten of them.
    let step = [
        100u64, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
    ]
    .into_iter()
    .find(|s| total / s <= 12)
    .unwrap_or(600_000);
    let mut tick = 0;
    while tick <= total {
        let tx = x(tick);
        svg.push_str(&format!(
            "<line class=\"grid\" x1=\"{tx:.1}\" y1=\"{:.1}\" x2=\"{tx:.1}\" y2=\"{:.1}\"/><text class=\"tick\" x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            TOP - 6.0,
            height - 12.0,
            TOP - 12.0,
            seconds(tick)
        ));
        tick += step;
    }
    for (row, (depth, span)) in rows.iter().enumerate() {
        let y = TOP + row as f64 * ROW_H;
        let end = span.end_ms.unwrap_or(now_ms).max(span.start_ms);
        let (bx, bw) = (x(span.start_ms), (x(end) - x(span.start_ms)).max(2.0));
        let class = match (span.end_ms, span.ok) {
            (None, _) => "open",
            (_, Some(false)) => "failed",
            _ if *depth == 0 => "step",
            _ => "part",
        };
        let duration = match span.duration_ms() {
            Some(ms) => seconds(ms),
            None => format!("{}+ (unfinished)", seconds(end - span.start_ms)),
        };
        let label = format!("{}{}", "  ".repeat(*depth), span.name);
        if row % 2 == 1 {
            svg.push_str(&format!(
                "<rect class=\"band\" x=\"0\" y=\"{y:.1}\" width=\"{width}\" height=\"{ROW_H}\"/>\n"
            ));
        }
        svg.push_str(&format!(
            "<g class=\"row\"><title>{name}: {start} to {stop} ({duration})</title>\
<text class=\"label d{depth}\" x=\"{lx:.1}\" y=\"{ty:.1}\">{text}</text>\
<rect class=\"{class}\" x=\"{bx:.1}\" y=\"{by:.1}\" width=\"{bw:.1}\" height=\"{bh:.1}\" rx=\"2\"/>\
<text class=\"dur\" x=\"{dx:.1}\" y=\"{ty:.1}\">{duration}</text></g>\n",
            name = escape(&span.name),
            start = seconds(span.start_ms),
            stop = seconds(end),
            lx = 8.0 + *depth as f64 * 14.0,
            ty = y + 15.0,
            text = escape(label.trim_start()),
            by = y + 4.0,
            bh = ROW_H - 8.0,
            dx = bx + bw + 4.0,
        ));
    }
    svg.push_str("</svg>");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>\n\
body{{font-family:system-ui,sans-serif;margin:16px;color:#1f2328;background:#fff}}\n\
h1{{font-size:18px;margin:0 0 4px}} p{{margin:0 0 10px;color:#57606a;font-size:13px}}\n\
svg text{{font-size:12px;font-family:system-ui,sans-serif;fill:#1f2328}}\n\
.tick{{fill:#57606a}} .grid{{stroke:#d0d7de;stroke-width:1}} .band{{fill:#f6f8fa}}\n\
.label.d0{{font-weight:600}} .dur{{fill:#57606a}}\n\
.step{{fill:#0969da}} .part{{fill:#54aeff}} .failed{{fill:#cf222e}} .open{{fill:#bf8700}}\n\
</style></head><body>\n<h1>{title}</h1>\n<p>{summary}</p>\n{svg}\n</body></html>\n",
        title = escape(title),
        summary = escape(&format!(
            "{} step(s) and part(s) over {}; blue: a step, light blue: a part of it, red: failed, amber: unfinished",
            rows.len(),
            seconds(total)
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_nest_end_once_and_order_depth_first() {
        let timeline = Timeline::new();
        let a = timeline.start("a", None);
        let b = timeline.record("b", None, 0, Some(5), Some(true));
        let part = timeline.record("part of a", Some(a), 0, Some(2), None);
        {
            let _abandoned = timeline.span("abandoned", Some(a));
        }
        timeline.end(a, true);
        timeline.end(a, false);
        let spans = timeline.spans();
        assert_eq!(spans[a].ok, Some(true));
        assert_eq!(spans[3].ok, Some(false), "a dropped guard ends as failed");
        let order: Vec<(usize, usize)> = ordered(&spans).iter().map(|(d, s)| (*d, s.id)).collect();
        assert_eq!(order, [(0, a), (1, part), (1, 3), (0, b)]);
        let json = serde_json::to_value(&spans[part]).unwrap();
        assert_eq!(json["parent"], a);
        assert_eq!(json["startMs"], 0);
        assert_eq!(json["endMs"], 2);
    }

    #[test]
    fn a_span_ends_at_a_past_time_once_and_never_before_its_start() {
        let timeline = Timeline::new();
        let pod = timeline.record("pod p created -> Ready", None, 1_000, None, None);
        timeline.end_at(pod, 3_000, true);
        timeline.end_at(pod, 9_000, false);
        let early = timeline.record("node n registered -> Ready", None, 2_000, None, None);
        timeline.end_at(early, 1_000, true);
        let spans = timeline.spans();
        assert_eq!(
            (spans[pod].end_ms, spans[pod].ok),
            (Some(3_000), Some(true))
        );
        assert_eq!(spans[early].duration_ms(), Some(0));
    }

    #[test]
    fn the_page_is_self_contained_and_escapes_names() {
        let spans = vec![
            Span {
                id: 0,
                name: "Cluster <k3s> & co".into(),
                parent: None,
                start_ms: 0,
                end_ms: Some(14_000),
                ok: Some(true),
            },
            Span {
                id: 1,
                name: "External Secrets chain".into(),
                parent: None,
                start_ms: 14_000,
                end_ms: None,
                ok: None,
            },
        ];
        let page = html("devstack up", &spans, 20_000);
        assert!(page.contains("Cluster &lt;k3s&gt; &amp; co"));
        assert!(page.contains("unfinished"));
        assert!(page.contains("<svg"));
        for external in ["http://", "https://", "<script", "<link"] {
            let outside_svg_ns = page.replace("http://www.w3.org/2000/svg", "");
            assert!(!outside_svg_ns.contains(external), "{external}");
        }
    }
}
