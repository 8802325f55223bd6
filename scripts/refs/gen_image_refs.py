#!/usr/bin/env python3
"""Reference patches for gateway/vision's parity test.

Runs where transformers and Pillow exist (the GPU machine); writes
image_refs.json into the output directory. The images are generated from a
formula that the Go test reproduces, so no image file is committed.

usage: gen_image_refs.py PREPROCESSOR_CONFIG OUT_DIR
"""
import hashlib
import json
import sys

import numpy as np
from PIL import Image

SIZES = [(28, 28), (56, 56), (100, 80), (224, 224), (640, 480), (1000, 33),
         (17, 17), (300, 200), (512, 512), (1280, 720), (2000, 1500), (45, 67)]
NSAMPLES = 64


def make_image(i, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.int64)
    r = (x * 31 + y * 17 + i * 7) % 256
    g = ((x ^ y) * 3 + i * 5) % 256
    b = (x * y + i * 29) % 256
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def local_smart_resize(height, width, factor, min_pixels, max_pixels):
    import math
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def numpy_patches(resized, cfg):
    """The slow processor's arithmetic, restated with numpy (a cross-check)."""
    img = resized.astype(np.float64) * cfg["rescale_factor"]
    img = img.astype(np.float32)
    mean = np.array(cfg["image_mean"], dtype=np.float32)
    std = np.array(cfg["image_std"], dtype=np.float32)
    img = ((img - mean) / std).transpose(2, 0, 1)  # C, H, W
    tp, ps, ms = cfg["temporal_patch_size"], cfg["patch_size"], cfg["merge_size"]
    patches = np.stack([img] * tp)  # T, C, H, W
    c, h, w = img.shape
    gt, gh, gw = 1, h // ps, w // ps
    patches = patches.reshape(gt, tp, c, gh // ms, ms, ps, gw // ms, ms, ps)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flat = patches.reshape(gt * gh * gw, c * tp * ps * ps)
    return flat, [gt, gh, gw]


def stats(flat):
    flat = np.asarray(flat, dtype=np.float32).reshape(-1)
    f64 = flat.astype(np.float64)
    n = flat.size
    idx = [(k * 7919 * 104729) % n for k in range(NSAMPLES)]
    return {
        "sum": float(f64.sum()),
        "abs_sum": float(np.abs(f64).sum()),
        "sq_sum": float((f64 * f64).sum()),
        "sample_idx": idx,
        "samples": [float(flat[j]) for j in idx],
    }


def main():
    cfg_path, out_dir = sys.argv[1], sys.argv[2]
    cfg = json.load(open(cfg_path))
    out = {"config": cfg, "images": [], "errors": []}
    try:
        import transformers
        out["transformers"] = transformers.__version__
    except Exception as e:  # noqa: BLE001
        out["errors"].append("import transformers: %r" % e)
    procs = {}
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
        procs["slow"] = Qwen2VLImageProcessor(**cfg)
    except Exception as e:  # noqa: BLE001
        out["errors"].append("slow processor: %r" % e)
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast
        procs["fast"] = Qwen2VLImageProcessorFast(**cfg)
    except Exception as e:  # noqa: BLE001
        out["errors"].append("fast processor: %r" % e)
    try:
        from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
    except Exception as e:  # noqa: BLE001
        smart_resize = local_smart_resize
        out["errors"].append("smart_resize from transformers: %r (used local copy)" % e)

    factor = cfg["patch_size"] * cfg["merge_size"]
    for i, (w, h) in enumerate(SIZES):
        arr = make_image(i, w, h)
        rec = {"index": i, "width": w, "height": h,
               "input_sha256": hashlib.sha256(arr.tobytes()).hexdigest()}
        try:
            if smart_resize is not None:
                rh, rw = smart_resize(h, w, factor=factor, min_pixels=cfg["min_pixels"], max_pixels=cfg["max_pixels"])
                rec["resized_hw"] = [int(rh), int(rw)]
                resized = np.asarray(Image.fromarray(arr).resize((rw, rh), resample=Image.BICUBIC, reducing_gap=None))
                rec["resized_sha256"] = hashlib.sha256(resized.tobytes()).hexdigest()
                pv, grid = numpy_patches(resized, cfg)
                rec["numpy"] = {"grid_thw": grid, "shape": list(pv.shape), **stats(pv)}
        except Exception as e:  # noqa: BLE001
            rec["resize_error"] = repr(e)
        for name, proc in procs.items():
            try:
                kw = {"return_tensors": "np"} if name == "slow" else {"return_tensors": "pt"}
                res = proc(images=[Image.fromarray(arr)], **kw)
                pv = res["pixel_values"]
                pv = pv.numpy() if hasattr(pv, "numpy") else np.asarray(pv)
                grid = res["image_grid_thw"]
                grid = grid.numpy() if hasattr(grid, "numpy") else np.asarray(grid)
                rec[name] = {"grid_thw": [int(v) for v in grid[0]], "shape": list(pv.shape), **stats(pv)}
            except Exception as e:  # noqa: BLE001
                rec[name + "_error"] = repr(e)
        out["images"].append(rec)
        print("image", i, w, h, {k: (v["grid_thw"] if isinstance(v, dict) and "grid_thw" in v else None) for k, v in rec.items() if k in ("slow", "fast")}, flush=True)
    with open(out_dir + "/image_refs.json", "w") as f:
        json.dump(out, f, indent=1)
    print("errors:", out["errors"])


if __name__ == "__main__":
    main()
