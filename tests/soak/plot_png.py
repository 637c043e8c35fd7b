"""A line plot as a PNG with nothing but the standard library (zlib), for
the soak's RSS curve: white background, a grid of 5 x 4, the curve in
blue, and the axis ranges written with a 3 x 5 pixel font at the corners.

    write_plot(path, xs, ys, x_label="s", y_label="MiB")
"""
import struct
import zlib

# 3 x 5 glyphs, rows top to bottom, 3 bits each (4 = left pixel)
FONT = {
    "0": [7, 5, 5, 5, 7], "1": [2, 6, 2, 2, 7], "2": [7, 1, 7, 4, 7], "3": [7, 1, 7, 1, 7],
    "4": [5, 5, 7, 1, 1], "5": [7, 4, 7, 1, 7], "6": [7, 4, 7, 5, 7], "7": [7, 1, 1, 1, 1],
    "8": [7, 5, 7, 5, 7], "9": [7, 5, 7, 1, 7], ".": [0, 0, 0, 0, 2], " ": [0, 0, 0, 0, 0],
    "-": [0, 0, 7, 0, 0], "s": [0, 3, 6, 1, 6], "M": [5, 7, 7, 5, 5], "i": [2, 0, 2, 2, 2],
    "B": [6, 5, 6, 5, 6], "K": [5, 5, 6, 5, 5],
}


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, rgb):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(rgb)

    def line(self, x0, y0, x1, y1, rgb):
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(n + 1):
            self.dot(round(x0 + (x1 - x0) * k / n), round(y0 + (y1 - y0) * k / n), rgb)

    def text(self, x, y, s, rgb=(0, 0, 0), scale=2):
        for ch in s:
            for r, bits in enumerate(FONT.get(ch, FONT[" "])):
                for c in range(3):
                    if bits >> (2 - c) & 1:
                        for dy in range(scale):
                            for dx in range(scale):
                                self.dot(x + c * scale + dx, y + r * scale + dy, rgb)
            x += 4 * scale

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
        return (b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_plot(path, xs, ys, x_label="s", y_label="MiB", w=800, h=320):
    c = Canvas(w, h)
    left, right, top, bottom = 70, w - 20, 20, h - 40
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    pad = max((y1 - y0) * 0.1, 0.5)
    y0, y1 = y0 - pad, y1 + pad
    if x1 == x0:
        x1 = x0 + 1

    def px(x):
        return round(left + (x - x0) / (x1 - x0) * (right - left))

    def py(y):
        return round(bottom - (y - y0) / (y1 - y0) * (bottom - top))
    for i in range(6):  # grid
        gx = left + i * (right - left) // 5
        c.line(gx, top, gx, bottom, (220, 220, 220))
    for i in range(5):
        gy = top + i * (bottom - top) // 4
        c.line(left, gy, right, gy, (220, 220, 220))
    c.line(left, bottom, right, bottom, (0, 0, 0))
    c.line(left, top, left, bottom, (0, 0, 0))
    pts = [(px(x), py(y)) for x, y in zip(xs, ys)]
    for (a, b), (p, q) in zip(pts, pts[1:]):
        c.line(a, b, p, q, (30, 80, 200))
        c.line(a, b + 1, p, q + 1, (30, 80, 200))
    c.text(4, top, f"{y1:.1f}")
    c.text(4, bottom - 10, f"{y0:.1f}")
    c.text(4, (top + bottom) // 2, y_label)
    c.text(left, bottom + 12, f"{x0:.0f} {x_label}")
    c.text(right - 90, bottom + 12, f"{x1:.0f} {x_label}")
    with open(path, "wb") as f:
        f.write(c.png())
