//! Throughput against thread count, one line per contender, as a self-contained SVG.
//!
//! Throughput is loop iterations completed by all workers over the contender's wall time, in
//! millions per second (cases that are skipped do not count). The x axis lists the thread
//! counts of the sweep at equal spacing; the y axis starts at 0.

use std::fmt::Write as _;

/// One contender's throughput at each thread count of the sweep (same order as `threads`).
pub struct Series {
    pub name: String,
    pub mloops_per_s: Vec<f64>,
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: [&str; 8] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The chart. `title` names the run's parameters.
pub fn render(title: &str, threads: &[usize], series: &[Series]) -> String {
    let max =
        series.iter().flat_map(|s| s.mloops_per_s.iter().copied()).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |i: usize| {
        LEFT + if threads.len() > 1 { pw * i as f64 / (threads.len() - 1) as f64 } else { pw / 2.0 }
    };
    let y = |v: f64| TOP + ph * (1.0 - v / max);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(o, r#"<text x="{LEFT}" y="22" font-size="14">{}</text>"#, esc(title));
    // Axes, grid and ticks.
    for k in 0..=5 {
        let v = max * k as f64 / 5.0;
        let yy = y(v);
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e0e0e0"/>"##,
            LEFT + pw
        );
        let _ =
            writeln!(o, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v:.2}</text>"#, LEFT - 6.0, yy + 4.0);
    }
    let _ = writeln!(
        o,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="black"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>"##,
        TOP + ph,
        TOP + ph,
        LEFT + pw,
        TOP + ph
    );
    for (i, t) in threads.iter().enumerate() {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{t}</text>"#,
            x(i),
            TOP + ph + 18.0
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">threads</text>"#,
        LEFT + pw / 2.0,
        H - 10.0
    );
    let _ = writeln!(
        o,
        r#"<text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">million loops per second</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    // One line and legend entry per contender.
    for (k, s) in series.iter().enumerate() {
        let c = COLOURS[k % COLOURS.len()];
        let pts: Vec<String> =
            s.mloops_per_s.iter().enumerate().map(|(i, &v)| format!("{:.1},{:.1}", x(i), y(v))).collect();
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{}"/>"#,
            pts.join(" ")
        );
        for (i, &v) in s.mloops_per_s.iter().enumerate() {
            let _ = writeln!(o, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#, x(i), y(v));
        }
        let ly = TOP + 10.0 + 18.0 * k as f64;
        let lx = LEFT + pw + 16.0;
        let _ = writeln!(
            o,
            r#"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{c}" stroke-width="2"/>"#,
            lx + 20.0
        );
        let _ = writeln!(o, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, lx + 26.0, ly + 4.0, esc(&s.name));
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_contender_and_points_inside_the_plot() {
        let s = vec![
            Series { name: "vmarena-nodes".into(), mloops_per_s: vec![10.0, 19.0, 20.0] },
            Series { name: "glibc <x>".into(), mloops_per_s: vec![5.0, 6.0, 0.0] },
        ];
        let svg = render("t", &[1, 2, 4], &s);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 6);
        assert!(svg.contains("glibc &lt;x&gt;"), "names are escaped");
        for c in svg.split("<circle cx=\"").skip(1) {
            let mut it = c.split('"');
            let cx: f64 = it.next().unwrap().parse().unwrap();
            let cy: f64 = it.nth(1).unwrap().parse().unwrap();
            assert!((LEFT..=W - RIGHT).contains(&cx) && (TOP..=H - BOTTOM).contains(&cy), "{cx},{cy}");
        }
    }
}
