// libvips for Parley's thumbnails, loaded when first used (dlopen), not linked: the library and
// the hundred-odd libraries it links (rsvg, poppler, gnutls, …) then cost the memory of a node
// that makes no thumbnail nothing — measured, 15 MiB resident in every node when linked — and a
// machine without libvips runs Parley with thumbnails unavailable. Each function is one fixed use
// of libvips, whose options are C variadic arguments, which Swift cannot pass.
#ifndef PARLEY_CVIPS_H
#define PARLEY_CVIPS_H

#include <stddef.h>

// Loads and starts libvips (libvips.so.42, the 8.x series), once per process: loaders of formats
// not meant for untrusted input blocked (only the common image formats stay), no cache of
// operations (each image is seen once), one thread per operation. 0 on success; -1 when it cannot
// be loaded, and parley_vips_error says why.
int parley_vips_start(void);

// The version of libvips loaded ("8.14.1"); empty before parley_vips_start succeeded.
const char *parley_vips_version(void);

// Copies the last error into `buffer` (at most `length` bytes, NUL-terminated) and clears it.
void parley_vips_error(char *buffer, size_t length);

// Frees what a function below answered in *out.
void parley_vips_free(void *bytes);

// A JPEG thumbnail of the image in `bytes`: at most `size` pixels on its longer side (never
// larger than the image), turned upright as its EXIF orientation says, in sRGB, without metadata,
// transparency put on white. 0 on success, with the JPEG in *out (free it with parley_vips_free);
// -1 when the bytes do not decode; -2, before anything is decoded, when the image's header says
// it has more than `pixels_max` pixels (a decompression bomb).
int parley_vips_thumbnail_jpeg(const void *bytes, size_t length, int size, int quality, long long pixels_max, void **out, size_t *out_length);

// A JPEG of `width` × `height` pixels of 8-bit RGB, row by row in `pixels`.
int parley_vips_jpeg_from_rgb(const unsigned char *pixels, int width, int height, int quality, void **out, size_t *out_length);

#endif
