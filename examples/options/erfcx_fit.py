"""Prints the coefficients of `erfcx` in options.cu: the Chebyshev fit of
degree 21 on t in [-1, 1] of erfc(x) e^(x^2) (1 + 2x), x = 4 (1 + t) / (1 - t),
highest power first, and the fit's error. Needs mpmath (pip install mpmath).
"""

import mpmath as mp

mp.mp.dps = 50
K = mp.mpf(4)


def scaled(t):
    if t >= 1:
        return 2 / mp.sqrt(mp.pi)
    x = K * (1 + t) / (1 - t)
    return mp.erfc(x) * mp.exp(x * x) * (1 + 2 * x)


coefficients, error = mp.chebyfit(scaled, [-1, 1], 22, error=True)
print(", ".join(repr(float(c)) for c in coefficients))
print("error", float(error))
