"""prepflow's ops against torchvision's transforms on the same images.

Each op's parity in docs/ops.md is a claim this file checks: "exact" ops must
give the same bytes as torchvision's PIL path for the same parameters (random
ranges pinned to one value, p = 1), bounded ops stay within their bound. The
images are `prepflow demo`'s JPEGs, PNGs made here to reach the corners
(noise, flat and two-level images, saturated colours, an image too small to
filter) and, when ../shared/datasets is there, 24 real photographs of
photos-512.

Run by ctest with Debian's /usr/bin/python3 (torch and torchvision from
python3-torch / python3-torchvision); skips without them.
"""
import os
import pathlib
import shutil
import sys
import tempfile
import unittest

import numpy as np

import prepflow
import testdata

try:
    import torchvision.transforms as T
    from PIL import Image
    from torchvision.datasets import ImageFolder
except ImportError:
    T = None

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
# Real photographs, when the shared datasets are there (the tests pass without).
PHOTOS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "datasets" / "photos-512"


def crafted_images(height, width, seed):
    """Images that reach the edge cases of histogram, blend and HSV code."""
    rng = np.random.default_rng(seed)
    ramp = np.linspace(0, 255, height * width).reshape(height, width)
    two = np.where(rng.random((height, width, 3)) < 0.5, 40, 200)
    saturated = np.zeros((height, width, 3))
    saturated[:, :, 0] = 255
    saturated[:, width // 2:, 2] = ramp[:, width // 2:]
    return {
        "noise": rng.integers(0, 256, (height, width, 3)),
        "flat": np.full((height, width, 3), 77),
        "two_levels": two,
        "ramp": np.stack([ramp, ramp[::-1], np.full_like(ramp, 128)], axis=2),
        "saturated": saturated,
        "dark": rng.integers(0, 4, (height, width, 3)),
    }


def setUpModule():
    global TMP, SETS
    TMP = tempfile.mkdtemp(prefix="prepflow-parity-")
    bin_dir = BUILD / "bin"
    SETS = {"demo": (testdata.demo_dataset(bin_dir, os.path.join(TMP, "demo")), 96, 96)}
    for name, (h, w) in {"crafted": (37, 23), "tiny": (2, 5)}.items():
        root = os.path.join(TMP, name)
        os.makedirs(os.path.join(root, "images"))
        for stem, array in crafted_images(h, w, seed=h).items():
            Image.fromarray(array.astype(np.uint8)).save(os.path.join(root, "images", stem + ".png"))
        SETS[name] = (root, h, w)
    if PHOTOS.is_dir():
        for path in sorted(PHOTOS.glob("*/*.jpg"))[:24]:
            dest = pathlib.Path(TMP, "photos", path.parent.name)
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, dest)
        SETS["photos"] = (os.path.join(TMP, "photos"), 224, 224)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def compare(test, stage, transform, max_diff=0, sets=None):
    """Runs `decode -> center_crop -> stage` over `sets` (default: all) and compares each
    image with torchvision's CenterCrop -> transform on the same file.
    Returns the fraction of values that differ."""
    differing = total = 0
    for name, (root, h, w) in SETS.items():
        if sets is not None and name not in sets:
            continue
        pipeline = os.path.join(TMP, "parity.pbtxt")
        with open(pipeline, "w") as f:
            f.write("stages { decode {} }\nstages { center_crop { height: %d width: %d } }\n"
                    "stages { %s }\n" % (h, w, stage))
        folder = ImageFolder(root)
        reference = T.Compose([T.CenterCrop((h, w)), transform])
        got = prepflow.Loader(root, pipeline=pipeline, batch_size=8, shuffle=False, seed=3,
                              threads=2, as_numpy=True)
        for batch in got.batches():
            for image, index in zip(batch.images, batch.indices):
                expected = np.asarray(reference(folder[index][0]), dtype=np.uint8)
                diff = np.abs(image.astype(int) - expected.astype(int))
                where = "%s on %s" % (stage, folder.samples[index][0])
                test.assertEqual(image.shape, expected.shape, where)
                test.assertLessEqual(int(diff.max()), max_diff, where)
                differing += int(np.count_nonzero(diff))
                total += diff.size
        got.close()
    return differing / total


@unittest.skipIf(T is None, "torchvision is not installed (Debian: python3-torchvision)")
class Exact(unittest.TestCase):
    """Ops documented as exact: the same bytes as torchvision."""

    def check(self, cases):
        for stage, transform in cases.items():
            with self.subTest(stage=stage):
                compare(self, stage, transform)

    def test_flips_grayscale_invert(self):
        self.check({
            "random_horizontal_flip { p: 1 }": T.RandomHorizontalFlip(p=1),
            "random_vertical_flip { p: 1 }": T.RandomVerticalFlip(p=1),
            "random_grayscale { p: 1 }": T.Grayscale(num_output_channels=3),
            "random_invert { p: 1 }": T.RandomInvert(p=1),
        })

    def test_color_jitter_each_adjustment(self):
        cases = {}
        for prop, values in {"brightness": [0.4, 1.3, 2.5], "contrast": [0, 0.5, 1.7],
                             "saturation": [0, 0.3, 2.0], "hue": [-0.5, -0.3, 0.1, 0.27, 0.5]}.items():
            for v in values:
                stage = "color_jitter { %s: [%r, %r] }" % (prop, v, v)
                cases[stage] = T.ColorJitter(**{prop: (v, v)})
        self.check(cases)

    def test_imageops(self):
        self.check({
            "random_posterize { bits: 3 p: 1 }": T.RandomPosterize(3, p=1),
            "random_posterize { bits: 0 p: 1 }": T.RandomPosterize(0, p=1),
            "random_posterize { bits: 8 p: 1 }": T.RandomPosterize(8, p=1),
            "random_solarize { threshold: 128 p: 1 }": T.RandomSolarize(128, p=1),
            "random_solarize { threshold: 100.5 p: 1 }": T.RandomSolarize(100.5, p=1),
            "random_solarize { threshold: 0 p: 1 }": T.RandomSolarize(0, p=1),
            "random_autocontrast { p: 1 }": T.RandomAutocontrast(p=1),
            "random_equalize { p: 1 }": T.RandomEqualize(p=1),
        })

    def test_sharpness(self):
        self.check({
            "random_adjust_sharpness { sharpness_factor: %r p: 1 }" % f:
                T.RandomAdjustSharpness(f, p=1) for f in [0, 0.5, 2, 3.7]})

    def test_p_zero_changes_nothing(self):
        self.check({"random_equalize { p: 0 }": T.Lambda(lambda x: x),
                    "random_solarize { threshold: 9 p: 0 }": T.Lambda(lambda x: x)})


@unittest.skipIf(T is None, "torchvision is not installed (Debian: python3-torchvision)")
class Bounded(unittest.TestCase):
    """Ops with a documented bound: within it, and rarely at it."""

    def test_gaussian_blur_within_one_level(self):
        # torch pads by reflection only up to the image's side, so the large
        # kernel skips the tiny images (prepflow folds the reflection again).
        for kernel, sigma, sets in [((5, 3), 1.5, None), ((23, 23), 4.0, ("demo", "crafted", "photos")),
                                    ((1, 7), 0.6, ("demo", "crafted", "photos"))]:
            stage = "gaussian_blur { kernel_size: [%d, %d] sigma: %r }" % (kernel + (sigma,))
            with self.subTest(stage=stage):
                fraction = compare(self, stage, T.GaussianBlur(kernel, sigma=sigma), max_diff=1,
                                   sets=sets)
                self.assertLess(fraction, 1 / 10000, stage)


if __name__ == "__main__":
    unittest.main()
