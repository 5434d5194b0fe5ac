// libvips for Parley's thumbnails, through functions Swift can call: libvips takes its options as
// C variadic arguments, which Swift cannot pass, so each use is one fixed function here.
#ifndef PARLEY_CVIPS_SHIM_H
#define PARLEY_CVIPS_SHIM_H

#include <string.h>
#include <vips/vips.h>

// Starts libvips once per process: loaders of formats not meant for untrusted input blocked
// (only the common image formats stay), no cache of operations (each image is seen once), one
// thread per operation (the caller runs several at most). 0 on success.
static inline int parley_vips_start(void) {
    if (VIPS_INIT("parley")) return -1;
    vips_block_untrusted_set(TRUE);
    vips_cache_set_max(0);
    vips_concurrency_set(1);
    return 0;
}

// Copies libvips's last error into `buffer` (at most `length` bytes, NUL-terminated) and clears it.
static inline void parley_vips_error(char *buffer, size_t length) {
    if (length == 0) return;
    strncpy(buffer, vips_error_buffer(), length - 1);
    buffer[length - 1] = 0;
    vips_error_clear();
}

// Frees what a function below answered in *out.
static inline void parley_vips_free(void *bytes) {
    g_free(bytes);
}

// Saves `image` as a JPEG of `quality` without metadata, into *out (free it with
// parley_vips_free). An image with transparency is put on white first. Takes `image`.
static inline int parley_vips_save_jpeg(VipsImage *image, int quality, void **out, size_t *out_length) {
    if (vips_image_hasalpha(image)) {
        VipsArrayDouble *white = vips_array_double_newv(1, 255.0);
        VipsImage *flat = NULL;
        int failed = vips_flatten(image, &flat, "background", white, NULL);
        vips_area_unref(VIPS_AREA(white));
        g_object_unref(image);
        if (failed) return -1;
        image = flat;
    }
    int failed = vips_jpegsave_buffer(image, out, out_length, "Q", quality, "strip", TRUE, "optimize_coding", TRUE, NULL);
    g_object_unref(image);
    return failed ? -1 : 0;
}

// A JPEG thumbnail of the image in `bytes`: at most `size` pixels on its longer side (never
// larger than the image), turned upright as its EXIF orientation says, in sRGB. 0 on success,
// with the JPEG in *out (free it with parley_vips_free); -1 when the bytes do not decode.
static inline int parley_vips_thumbnail_jpeg(const void *bytes, size_t length, int size, int quality, void **out, size_t *out_length) {
    VipsImage *thumbnail = NULL;
    if (vips_thumbnail_buffer((void *)bytes, length, &thumbnail, size, "height", size, "size", VIPS_SIZE_DOWN, NULL)) return -1;
    return parley_vips_save_jpeg(thumbnail, quality, out, out_length);
}

// A JPEG of `width` × `height` pixels of 8-bit RGB, row by row in `pixels`.
static inline int parley_vips_jpeg_from_rgb(const unsigned char *pixels, int width, int height, int quality, void **out, size_t *out_length) {
    VipsImage *image = vips_image_new_from_memory(pixels, (size_t)width * height * 3, width, height, 3, VIPS_FORMAT_UCHAR);
    if (image == NULL) return -1;
    return parley_vips_save_jpeg(image, quality, out, out_length);
}

#endif
