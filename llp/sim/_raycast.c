/*
 * Depth rays against a 2.5-D height grid, in C, all envs and all rays in one call.
 *
 * A ray walks the grid cell by cell (Amanatides-Woo traversal) and stops in the
 * first cell whose column it enters below the top; the hit is exact for the
 * piecewise-constant terrain the grid describes (flat-topped cells with vertical
 * sides), which is how the terrain generator rasterises boxes, platforms and
 * stairs. No Python objects are touched inside the loops.
 *
 * cast(heights[ny*nx] float32, nx, ny, origin_x, origin_y, resolution,
 *      origins[n*3] float64, dirs[n*m*3] float64 (unit), m, far, out[n*m] float64)
 * writes the hit distance along each ray, or `far` when nothing is hit within it.
 * Cells outside the grid are treated as infinitely deep.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

static double cast_one(const float *h, long nx, long ny, double ox, double oy, double res,
                       double px, double py, double pz, double dx, double dy, double dz, double far) {
  double gx = (px - ox) / res, gy = (py - oy) / res; /* position in grid units */
  long ix = (long)floor(gx), iy = (long)floor(gy);
  int sx = dx > 0 ? 1 : (dx < 0 ? -1 : 0), sy = dy > 0 ? 1 : (dy < 0 ? -1 : 0);
  /* ray parameter (metres) at which the ray crosses the next x / y cell boundary, and per cell */
  double tdx = sx ? res / fabs(dx) : INFINITY, tdy = sy ? res / fabs(dy) : INFINITY;
  double tx = sx > 0 ? (ix + 1 - gx) * tdx : (sx < 0 ? (gx - ix) * tdx : INFINITY);
  double ty = sy > 0 ? (iy + 1 - gy) * tdy : (sy < 0 ? (gy - iy) * tdy : INFINITY);
  double t = 0.0;
  while (t < far) {
    double t_exit = tx < ty ? tx : ty;
    if (t_exit > far) t_exit = far;
    if (ix >= 0 && ix < nx && iy >= 0 && iy < ny) {
      double top = h[iy * nx + ix];
      double z_in = pz + dz * t, z_out = pz + dz * t_exit;
      if (z_in <= top) return t; /* entered the column through its side */
      if (z_out <= top) return t + (z_in - top) / (z_in - z_out) * (t_exit - t); /* through its top */
    }
    if (t_exit >= far) break;
    t = t_exit;
    if (tx < ty) { tx += tdx; ix += sx; } else { ty += tdy; iy += sy; }
  }
  return far;
}

static PyObject *cast(PyObject *self, PyObject *args) {
  Py_buffer hb, ob, db, outb;
  long nx, ny, m;
  double ox, oy, res, far;
  if (!PyArg_ParseTuple(args, "y*lldddy*y*ldw*", &hb, &nx, &ny, &ox, &oy, &res, &ob, &db, &m, &far, &outb))
    return NULL;
  const float *h = (const float *)hb.buf;
  const double *o = (const double *)ob.buf, *d = (const double *)db.buf;
  double *out = (double *)outb.buf;
  Py_ssize_t n = ob.len / (3 * (Py_ssize_t)sizeof(double));
  if (hb.len < (Py_ssize_t)(nx * ny * sizeof(float)) || db.len < n * m * 3 * (Py_ssize_t)sizeof(double) ||
      outb.len < n * m * (Py_ssize_t)sizeof(double)) {
    PyBuffer_Release(&hb); PyBuffer_Release(&ob); PyBuffer_Release(&db); PyBuffer_Release(&outb);
    PyErr_SetString(PyExc_ValueError, "buffer sizes do not match nx, ny, the number of origins and m");
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < n; i++) {
    const double *p = o + 3 * i;
    for (long j = 0; j < m; j++) {
      const double *v = d + 3 * (i * m + j);
      out[i * m + j] = cast_one(h, nx, ny, ox, oy, res, p[0], p[1], p[2], v[0], v[1], v[2], far);
    }
  }
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&hb); PyBuffer_Release(&ob); PyBuffer_Release(&db); PyBuffer_Release(&outb);
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"cast", cast, METH_VARARGS, "Cast rays against a height grid; see the module source for arguments."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_raycast", "Height-grid ray casting.", -1, methods};

PyMODINIT_FUNC PyInit__raycast(void) { return PyModule_Create(&module); }
