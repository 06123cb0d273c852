//! goodput.svg: median goodput per link profile and method, one panel per
//! workload, log scale (lossy cubic rows are two orders below the rest).

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::plan::Profile;
use crate::summary::Group;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

pub fn goodput_svg(groups: &[Group], path: &Path) -> anyhow::Result<()> {
    let mut profiles: Vec<Profile> = Vec::new();
    let mut methods: Vec<String> = Vec::new();
    let mut workloads: Vec<String> = Vec::new();
    for g in groups {
        if !profiles.contains(&g.profile) {
            profiles.push(g.profile);
        }
        if !methods.contains(&g.method) {
            methods.push(g.method.clone());
        }
        if !workloads.contains(&g.workload) {
            workloads.push(g.workload.clone());
        }
    }
    let panel_h = 380u32;
    let root =
        SVGBackend::new(path, (1000, panel_h * workloads.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let panels = root.split_evenly((workloads.len().max(1), 1));
    let y_max = groups.iter().map(|g| g.ceiling_mbit).fold(1.0, f64::max) * 1.5;
    for (panel, workload) in panels.iter().zip(&workloads) {
        let n = profiles.len() as f64;
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("Median goodput, {workload} files (log scale; † = capped runs)"),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n, (0.1f64..y_max).log_scale())
            .map_err(plot_err)?;
        let labels: Vec<String> = profiles.iter().map(Profile::label).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(profiles.len() * 2 + 1)
            .x_label_formatter(&|x| {
                // Labels sit at bar-group centres (i + 0.5).
                let i = (x - 0.5).round();
                if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("Mbit/s")
            .draw()
            .map_err(plot_err)?;
        let width = 0.8 / methods.len().max(1) as f64;
        for (mi, method) in methods.iter().enumerate() {
            let color = COLORS[mi % COLORS.len()];
            let bars = groups
                .iter()
                .filter(|g| &g.method == method && &g.workload == workload)
                .filter_map(|g| {
                    let pi = profiles.iter().position(|p| *p == g.profile)? as f64;
                    let x0 = pi + 0.1 + mi as f64 * width;
                    let top = g.goodput_mbit.max(0.11);
                    Some(Rectangle::new(
                        [(x0, 0.1), (x0 + width * 0.9, top)],
                        color.filled(),
                    ))
                });
            chart
                .draw_series(bars)
                .map_err(plot_err)?
                .label(method.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
        }
        // Mark bars whose runs hit the time cap (goodput over the capped interval).
        let marks = groups
            .iter()
            .filter(|g| &g.workload == workload && g.capped > 0)
            .filter_map(|g| {
                let pi = profiles.iter().position(|p| *p == g.profile)? as f64;
                let mi = methods.iter().position(|m| *m == g.method)? as f64;
                let x = pi + 0.1 + mi * width;
                let y = g.goodput_mbit.max(0.11) * 1.15;
                Some(Text::new("†", (x, y), ("sans-serif", 14)))
            });
        chart.draw_series(marks).map_err(plot_err)?;
        // Goodput ceiling of each profile (rate × 1448/1500).
        let ceilings = profiles.iter().enumerate().map(|(i, p)| {
            let c = p.ceiling_mbit();
            PathElement::new(
                vec![(i as f64 + 0.05, c), (i as f64 + 0.95, c)],
                BLACK.stroke_width(1),
            )
        });
        chart
            .draw_series(ceilings)
            .map_err(plot_err)?
            .label("TCP goodput ceiling")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 10, y)], BLACK));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

fn plot_err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plot: {e:?}")
}

/// For callers that want the error context of the file.
pub fn write(groups: &[Group], path: &Path) -> anyhow::Result<()> {
    goodput_svg(groups, path).with_context(|| format!("write {}", path.display()))
}
