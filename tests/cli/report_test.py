#!/usr/bin/env python3
"""`attune db report --html`: a small sweep on the emulator, one measurement
marked failed, then the page: self-contained, escaped, holding every best
variant, problem key and gain `attune db best` prints, with bars sized in
proportion to their values; and rendered by headless Chromium into a
screenshot that shows the chart colours (so the SVG really draws).

Chromium is required (Debian's `chromium` package, tools/setup.sh): without it
the test fails rather than skips, so CI cannot pass without rendering.

Usage: report_test.py PATH_TO_ATTUNE [--keep-screenshot FILE]
"""
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import zlib

SWEEP = ["--backend", "emu", "--head-dims", "32", "--masks", "none,causal", "--seqlens", "48,64", "--max-variants", "3",
         "--repetitions", "1", "--quiet"]
WINDOW = (1280, 1600)
# Fill colours of the report's CSS: best bar, other bars, gain bars.
COLOURS = {"best": (0xE8, 0x70, 0x2A), "other": (0x6E, 0x93, 0xC4), "gain": (0x3F, 0x9E, 0x6A)}

failures = 0


def check(ok, what):
    global failures
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures += 1
    return ok


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)


def best_rows(attune, db):
    """(problem key, variant, gain) of each line of `attune db best`; the device
    name may hold spaces, so columns are taken from the right."""
    out = run([attune, "db", "--db", db, "best"])
    rows = []
    for line in out.stdout.splitlines()[1:]:
        cols = line.split()
        rows.append((cols[-4], cols[-3], cols[-1]))
    return rows


def heuristic_default(attune, tmp):
    """The variant attune runs on the sweep's problem class without a tuning database."""
    env = dict(os.environ, ATTUNE_TUNING_DB=os.path.join(tmp, "absent.db"))
    out = run([attune, "explain", "--backend", "emu", "--seqlen-q", "64", "--seqlen-k", "64", "--dk", "32", "--dv",
               "32"], env=env)
    lines = dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)
    check("heuristic" in lines.get("rule", ""), "attune explain without a database: %s" % lines.get("rule", "").strip())
    return lines["variant"].strip()


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def png_pixels(path):
    """(width, height, {rgb: count}) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (2, 6) or interlace != 0:
        raise ValueError("unexpected PNG format %r" % (header,))
    bpp = 4 if colour_type == 6 else 3
    stride = width * bpp
    raw = zlib.decompress(idat)
    counts = {}
    prev = bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                up_left = prev[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + paeth(left, prev[i], up_left)) & 0xFF
        for x in range(0, stride, bpp):
            pixel = bytes(line[x:x + 3])
            counts[pixel] = counts.get(pixel, 0) + 1
        prev = bytes(line)
    return width, height, counts


def pixels_near(counts, rgb, tolerance=6):
    return sum(n for p, n in counts.items() if all(abs(a - b) <= tolerance for a, b in zip(p, rgb)))


def check_page(page, attune, db, failed_variant, expected_gains):
    check("<svg" in page and "<text" in page and "<rect" in page, "the page holds inline SVG charts with text")
    external = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*""", page, re.IGNORECASE)
    check(not external, "no external src or href (%s)" % (external[:3] or "none"))
    check(not re.search(r"<script|<link|@import|url\(", page, re.IGNORECASE),
          "no scripts, linked stylesheets, imports or url() resources")
    rows = best_rows(attune, db)
    check(len(rows) == 2, "attune db best lists 2 problem keys (%d)" % len(rows))
    for key, variant, gain in rows:
        check(key in page and variant in page, "page shows %s -> %s" % (key, variant))
        expected = expected_gains[key.split("/")[4]]
        check(gain == expected, "db best's gain %s is the default's fastest over the best (%s)" % (gain, expected))
        check(gain == "-" or re.search(r"<td><code>%s</code>.*?<td class=\"num\">%s</td>" % (
            re.escape(key), re.escape(gain)), page) is not None, "the page's table shows the gain %s" % gain)
    check(re.search(r'class="failed">failed:[^<]*<code>' + re.escape(failed_variant), page) is not None,
          "the failed variant %s is listed below its chart" % failed_variant)
    # The database's name holds & < >: escaped everywhere, raw nowhere.
    check("a&amp;b&lt;c&gt;.db" in page and "a&b<c>" not in page, "text is HTML-escaped")
    # Bars in proportion: within each chart, width / value is one constant.
    charts = re.findall(r"<svg.*?</svg>", page, re.DOTALL)
    check(len(charts) == 3, "one gain chart and a chart per key (%d charts)" % len(charts))
    proportional = True
    for chart in charts:
        bars = re.findall(r'<rect class="bar[^"]*" x="[\d.]+" y="[\d.]+" width="([\d.]+)"[^>]*/><text[^>]*>([\d.]+)',
                          chart)
        ratios = [float(w) / float(v) for w, v in bars]
        proportional &= len(bars) >= 2 and max(ratios) / min(ratios) < 1.02
    check(proportional, "bar widths are proportional to their values")


def main():
    global failures
    attune = os.path.abspath(sys.argv[1])
    keep = sys.argv[sys.argv.index("--keep-screenshot") + 1] if "--keep-screenshot" in sys.argv else None
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("FAIL chromium not found on PATH: install Debian's chromium package (tools/setup.sh lists it); "
              "this test renders the report and does not skip")
        return 1
    with tempfile.TemporaryDirectory(prefix="attune_report_") as tmp:
        db = os.path.join(tmp, "a&b<c>.db")
        tune = run([attune, "tune", "--db", db] + SWEEP)
        if not check(tune.returncode == 0, "attune tune: %s" % (tune.stdout.strip() or tune.stderr.strip())):
            return 1
        default = heuristic_default(attune, tmp)
        con = sqlite3.connect(db)
        measured = con.execute("select p.mask, v.variant_id, m.median_ms from measurements m "
                               "join variants v on v.id = m.variant join problems p on p.id = m.problem").fetchall()
        best = dict(con.execute("select b.mask, v.variant_id from best b join variants v on v.id = b.variant"))
        check(set(best) == {"none", "causal-bottom-right"}, "a best variant for each mask (%s)" % sorted(best))
        check(any(v == default for _, v, _ in measured), "the sweep measured the heuristic default %s" % default)
        # The gain, computed here from the rows: default's fastest / best.
        expected_gains = {}
        for mask, variant in best.items():
            times = [ms for m, v, ms in measured if m == mask]
            default_times = [ms for m, v, ms in measured if m == mask and v == default]
            expected_gains[mask] = "%.2fx" % (min(default_times) / min(times)) if default_times else "-"
        # A variant of the "none" key that is neither its best nor the default
        # becomes failed there (the emulator never fails), so the page must
        # list it in grey and the gains stay as they are.
        variant = sorted({v for m, v, _ in measured if m == "none" and v not in (best["none"], default)})[0]
        con.execute("update measurements set ok = 0, median_ms = null, tflops = null where variant in "
                    "(select id from variants where variant_id = ?) and problem in "
                    "(select id from problems where mask = 'none')", (variant,))
        con.commit()
        con.close()
        check(run([attune, "db", "--db", db, "verify"]).returncode == 0, "the database still verifies")

        missing = run([attune, "db", "--db", db, "report"])
        check(missing.returncode == 2 and "--html" in missing.stderr, "report without --html is a usage error")
        html = os.path.join(tmp, "report.html")
        report = run([attune, "db", "--db", db, "report", "--html", html])
        check(report.returncode == 0 and report.stdout.strip() == html,
              "attune db report prints the page's path (%r %r)" % (report.stdout.strip(), report.stderr.strip()))
        check(os.path.exists(html) and not os.path.exists(html + ".tmp"), "the page is written, no .tmp left")
        if not os.path.exists(html):
            return 1
        page = open(html, encoding="utf-8").read()
        check_page(page, attune, db, variant, expected_gains)

        png = os.path.join(tmp, "report.png")
        shot = run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--user-data-dir=" + os.path.join(tmp, "chromium-profile"), "--screenshot=" + png,
                    "--window-size=%d,%d" % WINDOW, "file://" + html])
        if not check(shot.returncode == 0 and os.path.exists(png), "chromium wrote a screenshot (exit %d%s)" % (
                shot.returncode, "" if shot.returncode == 0 else ": " + shot.stderr.strip()[-500:])):
            return 1
        if keep:
            shutil.copyfile(png, keep)
        size = os.path.getsize(png)
        check(size > 20000, "screenshot is %d bytes (a blank page is about 9 KB)" % size)
        width, height, counts = png_pixels(png)
        check((width, height) == WINDOW, "screenshot is %dx%d" % (width, height))
        total = width * height
        white = counts.get(b"\xff\xff\xff", 0)
        check(len(counts) > 50, "%d distinct colours (not a flat page)" % len(counts))
        check(white < 0.98 * total, "%.1f%% of the pixels are not white" % (100.0 * (total - white) / total))
        for name, rgb in COLOURS.items():
            if name == "gain" and all(g in ("-", "1.00x") for g in expected_gains.values()):
                continue  # no bar is drawn as a gain
            n = pixels_near(counts, rgb)
            check(n > 500, "%d pixels in the colour of the %s bars" % (n, name))
    print("%s: %d failed checks" % ("FAIL" if failures else "ok", failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
