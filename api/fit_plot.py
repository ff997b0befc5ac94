"""A fitted latency against the calls it was fitted to: histogram and densities, and the
families' CDFs (`pxn calibrate --plots`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from pxn.api.plots import Picture

if TYPE_CHECKING:
    from pxn.calibrate.traces.fit import LatencyFit


# Each family keeps its colour from figure to figure, whatever its AIC rank.
FAMILY_COLOURS = {
    "lognorm": "tab:blue",
    "gamma": "tab:orange",
    "weibull_min": "tab:green",
    "expon": "tab:red",
}


HEAVY_TAIL = 20  # max / median beyond which a linear axis squeezes the body into one bin


def latency_scale(data: Sequence[float]) -> str:
    """ "log" when the sample's tail is long enough to crush its body on a linear axis."""

    values = np.asarray(data, dtype=float)
    median = float(np.median(values)) if len(values) else 0.0
    return "log" if median > 0 and values.max() / median > HEAVY_TAIL else "linear"


def latency_fit_figure(fit: LatencyFit) -> Figure:
    """Fit diagnostics: histogram with every fitted density, and a Q-Q plot.

    A heavy-tailed sample gets log-scaled latency axes. Its histogram then
    has log-spaced bins and shows density per decade (the fitted densities
    times x ln 10), so that areas are still probabilities on the axis drawn.
    """
    import scipy.stats

    data = np.sort(np.asarray(fit.samples))
    log = latency_scale(data) == "log"
    fig = Picture(figsize=(10, 4.4), layout="constrained")
    hist, qq = fig.subplots(1, 2)
    if log:
        exponents = np.histogram_bin_edges(np.log10(data), bins="auto")
        counts, _ = np.histogram(np.log10(data), bins=exponents)
        heights = counts / (len(data) * np.diff(exponents))
        hist.stairs(heights, 10**exponents, fill=True, color="lightgray", label="observed")
        hist.stairs(heights, 10**exponents, color="gray")
        grid = np.geomspace(data.min() / 1.5, data.max() * 1.5, 400)
        hist.set_xscale("log")
    else:
        hist.hist(
            data, bins="auto", density=True, color="lightgray", edgecolor="gray", label="observed"
        )
        grid = np.linspace(0, data.max() * 1.05, 400)
    chosen = fit.chosen.dist
    for f in fit.fits:
        with np.errstate(all="ignore"):  # a Weibull with c < 1 is infinite at 0
            density = getattr(scipy.stats, f.family)(**f.params).pdf(grid)
        if log:
            density = density * grid * np.log(10)  # per decade
        bold = f.family == chosen
        hist.plot(
            grid,
            density,
            color=FAMILY_COLOURS.get(f.family),
            linewidth=2.4 if bold else 1.1,
            alpha=1.0 if bold else 0.7,
            label=f"{f.family} (AIC {f.aic:.0f}, KS p={f.ks_pvalue:.2g})" + (" *" if bold else ""),
        )
    hist.set_xlabel(f"{fit.what} latency (seconds{', log scale' if log else ''})")
    hist.set_ylabel("density per decade" if log else "density (1/s)")
    hist.set_title(f"{fit.what}: n={fit.n}, chosen {chosen}" + ("" if fit.fits else " (too few)"))
    hist.legend(fontsize="small")

    # Q-Q against the chosen family, or the best-AIC one when resampling was chosen.
    reference = fit.fit_of(chosen) or (fit.fits[0] if fit.fits else None)
    if reference is None:
        qq.text(0.5, 0.5, "too few points for a Q-Q plot", ha="center", transform=qq.transAxes)
        qq.set_axis_off()
    else:
        frozen = getattr(scipy.stats, reference.family)(**reference.params)
        probabilities = (np.arange(1, len(data) + 1) - 0.5) / len(data)
        theoretical = frozen.ppf(probabilities)
        qq.plot(theoretical, data, ".", markersize=3, alpha=0.6, label="observed quantiles")
        top = max(theoretical.max(), data.max())
        bottom = min(theoretical.min(), data.min()) if log else 0
        qq.plot([bottom, top], [bottom, top], "k--", linewidth=1, label="y = x (perfect fit)")
        if log:
            qq.set_xscale("log")
            qq.set_yscale("log")
        scale = ", log scale" if log else ""
        qq.set_xlabel(f"{reference.family} quantile (seconds{scale})")
        qq.set_ylabel(f"observed quantile (seconds{scale})")
        qq.set_title(f"Q-Q against {reference.family}")
        qq.legend(fontsize="small")
    return fig
