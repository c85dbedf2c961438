/*
 * sin, cos and atan for kernels in C and C++ (`#include "offload_math.h"` beside offload.h): a
 * kernel has no C library, and WebAssembly has sqrt, floor, ceil, trunc, nearest, abs, min, max
 * and copysign as instructions but no trigonometry. These are musl's (FreeBSD's fdlibm) double
 * algorithms, as AssemblyScript's Math: the same reduction by pi/2 (Cody-Waite in up to three
 * rounds) and the same polynomials, so a C kernel and an AssemblyScript one agree to the last
 * bit or so (within 1 ulp of the true value).
 * The reduction is fdlibm's for |x| < 2^20 * pi/2 (about 1.6e6); beyond that, where fdlibm uses
 * a multi-precision reduction (Payne-Hanek, a table of 2/pi's bits), these use the three-round
 * one too, whose absolute error grows with |x| (checked against glibc: within 1 ulp for
 * |x| < 1e6). For |x| >= 2^50 sin and cos give NaN rather than a value without its precision.
 * sqrt is `offload_sqrt` (the f64.sqrt instruction); the C names are left to the program.
 */
#ifndef OFFLOAD_MATH_H
#define OFFLOAD_MATH_H

#define OFFLOAD_MATH_INLINE static inline __attribute__((always_inline))

OFFLOAD_MATH_INLINE unsigned offload_high_word_(double x) {
  unsigned long long bits;
  __builtin_memcpy(&bits, &x, sizeof bits);
  return (unsigned)(bits >> 32);
}

OFFLOAD_MATH_INLINE double offload_sqrt(double x) { return __builtin_sqrt(x); }

/* sin on [-pi/4, pi/4]; y is the tail of x (x + y the reduced argument), iy whether y is nonzero. */
OFFLOAD_MATH_INLINE double offload_ksin_(double x, double y, int iy) {
  const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
               S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
               S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
  double z = x * x, w = z * z;
  double r = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
  double v = z * x;
  if (iy == 0) return x + v * (S1 + z * r);
  return x - ((z * (0.5 * y - v * r) - y) - v * S1);
}

/* cos on [-pi/4, pi/4], with x's tail y. */
OFFLOAD_MATH_INLINE double offload_kcos_(double x, double y) {
  const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
               C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
               C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
  double z = x * x, w = z * z;
  double r = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
  double hz = 0.5 * z;
  w = 1.0 - hz;
  return w + (((1.0 - w) - hz) + (z * r - x * y));
}

/* x - n * pi/2 as *y0 + *y1 with |*y0| <= pi/4 (about); returns n. Cody-Waite, up to three rounds. */
OFFLOAD_MATH_INLINE int offload_rem_pio2_(double x, double *y0, double *y1) {
  const double invpio2 = 6.36619772367581382433e-01, pio2_1 = 1.57079632673412561417e+00,
               pio2_1t = 6.07710050650619224932e-11, pio2_2 = 6.07710050630396597660e-11,
               pio2_2t = 2.02226624879595063154e-21, pio2_3 = 2.02226624871116645580e-21,
               pio2_3t = 8.47842766036889956997e-32;
  unsigned ix = offload_high_word_(x) & 0x7fffffff;
  double fn = __builtin_rint(x * invpio2);
  double r = x - fn * pio2_1;
  double w = fn * pio2_1t; /* first round: good to 85 bits */
  double y = r - w;
  int ex = (int)(ix >> 20);
  if (ex - (int)((offload_high_word_(y) >> 20) & 0x7ff) > 16) { /* second round: 118 bits */
    double t = r;
    w = fn * pio2_2;
    r = t - w;
    w = fn * pio2_2t - ((t - r) - w);
    y = r - w;
    if (ex - (int)((offload_high_word_(y) >> 20) & 0x7ff) > 49) { /* third round: 151 bits */
      t = r;
      w = fn * pio2_3;
      r = t - w;
      w = fn * pio2_3t - ((t - r) - w);
      y = r - w;
    }
  }
  *y0 = y;
  *y1 = (r - y) - w;
  return (int)(long long)fn;
}

static inline double offload_sin(double x) {
  unsigned ix = offload_high_word_(x) & 0x7fffffff;
  if (ix <= 0x3fe921fb) { /* |x| <= pi/4 */
    if (ix < 0x3e500000) return x; /* |x| < 2^-26 */
    return offload_ksin_(x, 0.0, 0);
  }
  if (ix >= 0x43100000) return (x - x) / (x - x); /* |x| >= 2^50, inf: NaN */
  double y0, y1;
  switch (offload_rem_pio2_(x, &y0, &y1) & 3) {
    case 0: return offload_ksin_(y0, y1, 1);
    case 1: return offload_kcos_(y0, y1);
    case 2: return -offload_ksin_(y0, y1, 1);
    default: return -offload_kcos_(y0, y1);
  }
}

static inline double offload_cos(double x) {
  unsigned ix = offload_high_word_(x) & 0x7fffffff;
  if (ix <= 0x3fe921fb) {              /* |x| <= pi/4 */
    if (ix < 0x3e46a09e) return 1.0; /* |x| < 2^-27 * sqrt(2) */
    return offload_kcos_(x, 0.0);
  }
  if (ix >= 0x43100000) return (x - x) / (x - x); /* |x| >= 2^50, inf: NaN */
  double y0, y1;
  switch (offload_rem_pio2_(x, &y0, &y1) & 3) {
    case 0: return offload_kcos_(y0, y1);
    case 1: return -offload_ksin_(y0, y1, 1);
    case 2: return -offload_kcos_(y0, y1);
    default: return offload_ksin_(y0, y1, 1);
  }
}

static inline double offload_atan(double x) {
  const double aT0 = 3.33333333333329318027e-01, aT1 = -1.99999999998764832476e-01,
               aT2 = 1.42857142725034663711e-01, aT3 = -1.11111104054623557880e-01,
               aT4 = 9.09088713343650656196e-02, aT5 = -7.69187620504482999495e-02,
               aT6 = 6.66107313738753120669e-02, aT7 = -5.83357013379057348645e-02,
               aT8 = 4.97687799461593236017e-02, aT9 = -3.65315727442169155270e-02,
               aT10 = 1.62858201153657823623e-02;
  unsigned hx = offload_high_word_(x), ix = hx & 0x7fffffff;
  int negative = hx >> 31;
  double hi, lo;
  if (ix >= 0x44100000) { /* |x| >= 2^66 */
    if (x != x) return x;
    return negative ? -1.57079632679489655800e+00 : 1.57079632679489655800e+00;
  }
  int id;
  if (ix < 0x3fdc0000) {          /* |x| < 0.4375 */
    if (ix < 0x3e400000) return x; /* |x| < 2^-27 */
    id = -1;
    hi = lo = 0.0;
  } else {
    x = __builtin_fabs(x);
    if (ix < 0x3ff30000) {   /* |x| < 1.1875 */
      if (ix < 0x3fe60000) { /* 7/16 <= |x| < 11/16 */
        id = 0;
        x = (2.0 * x - 1.0) / (2.0 + x);
        hi = 4.63647609000806093515e-01;
        lo = 2.26987774529616870924e-17;
      } else { /* 11/16 <= |x| < 19/16 */
        id = 1;
        x = (x - 1.0) / (x + 1.0);
        hi = 7.85398163397448278999e-01;
        lo = 3.06161699786838301793e-17;
      }
    } else if (ix < 0x40038000) { /* |x| < 2.4375 */
      id = 2;
      x = (x - 1.5) / (1.0 + 1.5 * x);
      hi = 9.82793723247329054082e-01;
      lo = 1.39033110312309984516e-17;
    } else { /* 2.4375 <= |x| < 2^66 */
      id = 3;
      x = -1.0 / x;
      hi = 1.57079632679489655800e+00;
      lo = 6.12323399573676603587e-17;
    }
  }
  double z = x * x, w = z * z;
  double s1 = z * (aT0 + w * (aT2 + w * (aT4 + w * (aT6 + w * (aT8 + w * aT10)))));
  double s2 = w * (aT1 + w * (aT3 + w * (aT5 + w * (aT7 + w * aT9))));
  if (id < 0) return x - x * (s1 + s2);
  z = hi - ((x * (s1 + s2) - lo) - x);
  return negative ? -z : z;
}

#endif
