//! SVG plots of sweeps (plotters): reply rate and errors against offered rate, and latency
//! percentiles against offered rate, one colour per server.

use plotters::prelude::*;

use crate::sweep::Step;

const COLOURS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Draw `series` (label, steps) as one SVG document with two charts stacked.
pub fn sweep_svg(title: &str, series: &[(String, Vec<Step>)]) -> Result<String, String> {
    let mut svg = String::new();
    draw(&mut svg, title, series).map_err(|e| format!("plot: {e}"))?;
    Ok(svg)
}

fn draw(
    svg: &mut String,
    title: &str,
    series: &[(String, Vec<Step>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let all = || series.iter().flat_map(|(_, s)| s.iter());
    let max_x = all().map(|s| s.offered).fold(1.0, f64::max) * 1.05;
    let max_y = all()
        .map(|s| s.achieved.max(s.errors_per_sec).max(s.offered))
        .fold(1.0, f64::max)
        * 1.05;
    let min_lat = all()
        .map(|s| s.p50_ms)
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min)
        .min(1.0)
        * 0.8;
    let max_lat = all().map(|s| s.p99_ms).fold(1.0, f64::max) * 1.5;

    let root = SVGBackend::with_string(svg, (900, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (top, bottom) = root.split_vertically(440);

    let mut rate = ChartBuilder::on(&top)
        .caption(
            "replies/s and errors/s vs offered requests/s",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_x, 0f64..max_y)?;
    rate.configure_mesh()
        .x_desc("offered requests/s")
        .y_desc("per second")
        .draw()?;
    rate.draw_series(LineSeries::new(
        [(0.0, 0.0), (max_x, max_x)],
        ShapeStyle::from(&BLACK.mix(0.25)).stroke_width(1),
    ))?
    .label("offered = achieved")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.25)));
    for (k, (label, steps)) in series.iter().enumerate() {
        let c = COLOURS[k % COLOURS.len()];
        let pts: Vec<(f64, f64)> = steps.iter().map(|s| (s.offered, s.achieved)).collect();
        rate.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(format!("{label} replies/s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        rate.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
        let errs: Vec<(f64, f64)> = steps
            .iter()
            .map(|s| (s.offered, s.errors_per_sec))
            .collect();
        rate.draw_series(DashedLineSeries::new(errs, 6, 4, c.stroke_width(1)))?
            .label(format!("{label} errors/s"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(1)));
    }
    rate.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;

    let mut lat = ChartBuilder::on(&bottom)
        .caption(
            "latency (p50 solid, p99 dashed) vs offered requests/s",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_x, (min_lat..max_lat).log_scale())?;
    lat.configure_mesh()
        .x_desc("offered requests/s")
        .y_desc("ms (log)")
        .draw()?;
    for (k, (label, steps)) in series.iter().enumerate() {
        let c = COLOURS[k % COLOURS.len()];
        let p50: Vec<(f64, f64)> = steps
            .iter()
            .map(|s| (s.offered, s.p50_ms.max(min_lat)))
            .collect();
        let p99: Vec<(f64, f64)> = steps
            .iter()
            .map(|s| (s.offered, s.p99_ms.max(min_lat)))
            .collect();
        lat.draw_series(LineSeries::new(p50, c.stroke_width(2)))?
            .label(format!("{label} p50"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
        lat.draw_series(DashedLineSeries::new(p99, 6, 4, c.stroke_width(2)))?
            .label(format!("{label} p99"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(1)));
    }
    lat.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(offered: f64, achieved: f64) -> Step {
        Step {
            offered,
            achieved,
            p50_ms: 0.2,
            p90_ms: 0.4,
            p99_ms: 1.5,
            errors_per_sec: 0.0,
            errors: 0,
            unfinished: 0,
        }
    }

    #[test]
    fn one_svg_with_every_series() {
        let svg = sweep_svg(
            "t",
            &[
                (
                    "ramjet".into(),
                    vec![step(1000.0, 1000.0), step(2000.0, 1990.0)],
                ),
                (
                    "nginx".into(),
                    vec![step(1000.0, 1000.0), step(2000.0, 1500.0)],
                ),
            ],
        )
        .unwrap();
        assert!(svg.starts_with("<svg"));
        for label in ["ramjet replies/s", "nginx p99", "offered requests/s"] {
            assert!(svg.contains(label), "{label} missing");
        }
    }
}
