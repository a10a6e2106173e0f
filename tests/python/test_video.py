"""Video pipelines from Python, against PyAV (Debian's python3-av 10, which
wraps the same FFmpeg libraries) and torchvision, on clips made here with
the ffmpeg tool: synthetic sources and a generated photograph panned and
zoomed (zoompan), as H.264 in MP4 (with B-frames), VP9 in WebM, MJPEG in AVI
and AV1 in Matroska, at several sizes and frame rates, one of them variable.

What must hold: decode_video's frames equal PyAV's to_ndarray('rgb24') of the
frames shown at the clip's times, byte for byte; image ops after it apply
to each frame with one draw (torchvision's Resize, CenterCrop and Normalize
on each frame give the same floats, and its _transforms_video classes on the
clip); CSV manifests with start and end times and --clips-per-video place
each clip as PyTorchVideo's uniform sampler does; clips are the same at every
cut on a real worker; batches are [B, T, C, H, W], or [B, C, T, H, W].
"""
import os
import pathlib
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

import prepflow
import testdata
from prepflow import ops

try:
    import av
except ImportError:
    av = None
try:
    import torch
    import torchvision.transforms as T
    from PIL import Image
except ImportError:
    torch = None

BUILD = pathlib.Path(os.environ.get("PREPFLOW_BUILD_DIR", "build")).resolve()
BIN = BUILD / "bin"
FFMPEG = shutil.which("ffmpeg")
# (class, name, ffmpeg input arguments, output arguments). All 3 s or less.
VIDEOS = [
    ("pan", "photo.mp4", ["-loop", "1", "-i", "{photo}"],
     ["-vf", "zoompan=z='1+0.004*on':x='iw/2-(iw/zoom/2)+on':y='ih/2-(ih/zoom/2)':d=75:"
      "s=192x128:fps=25", "-frames:v", "75", "-c:v", "libx264", "-bf", "2", "-g", "20",
      "-pix_fmt", "yuv420p"]),
    ("pan", "vfr.mkv", ["-f", "lavfi", "-i", "testsrc2=size=192x128:rate=30:duration=2"],
     ["-vf", "setpts='PTS+gt(N,20)*0.3/TB'", "-fps_mode", "vfr", "-c:v", "libx264"]),
    ("synthetic", "mandel.webm", ["-f", "lavfi", "-i", "mandelbrot=size=192x128:rate=20"],
     ["-t", "2.5", "-c:v", "libvpx-vp9", "-b:v", "300k", "-g", "9"]),
    ("synthetic", "bars.avi", ["-f", "lavfi", "-i", "testsrc2=size=192x128:rate=24"],
     ["-t", "2", "-c:v", "mjpeg", "-q:v", "4"]),
    ("synthetic", "av1.mkv", ["-f", "lavfi", "-i", "testsrc=size=192x128:rate=15"],
     ["-t", "2", "-c:v", "libsvtav1", "-preset", "12", "-g", "10"]),
]

# Every video is 192x128: a center crop of that size keeps every frame whole.
WHOLE = ops.CenterCrop(height=128, width=192)


def make_videos(root, photo):
    for cls, name, inputs, outputs in VIDEOS:
        folder = pathlib.Path(root, cls)
        folder.mkdir(parents=True, exist_ok=True)
        args = [a.replace("{photo}", str(photo)) for a in inputs]
        subprocess.run([FFMPEG, "-nostdin", "-loglevel", "error", "-y", *args, *outputs,
                        str(folder / name)], check=True, capture_output=True,
                       stdin=subprocess.DEVNULL)


def setUpModule():
    global TMP, ROOT
    TMP = tempfile.mkdtemp(prefix="prepflow-video-")
    ROOT = os.path.join(TMP, "videos")
    if FFMPEG:
        photos = testdata.demo_dataset(BIN, os.path.join(TMP, "photos"))
        make_videos(ROOT, sorted(pathlib.Path(photos).glob("*/*"))[0])


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def files():
    """The dataset's videos in prepflow's order (class folders, then names)."""
    return sorted(str(p) for p in pathlib.Path(ROOT).glob("*/*"))


def pyav_frames(path):
    """Every frame PyAV decodes, as RGB24 arrays, and its time from the stream's start."""
    with av.open(path) as container:
        stream = container.streams.video[0]
        origin = stream.start_time or 0
        tick = stream.time_base.numerator / stream.time_base.denominator
        frames = [(float(f.pts - origin) * tick, f.to_ndarray(format="rgb24"))
                  for f in container.decode(stream)]
    return frames


def shown_at(frames, t):
    """The frame shown at time t: the last at or before it (the first before all)."""
    chosen = frames[0][1]
    for when, image in frames:
        if when > t + 1e-6:
            break
        chosen = image
    return chosen


def run(pipeline, batch_size=1, **kw):
    """Every sample's output in dataset order (testdata.run_loader)."""
    return testdata.run_loader(ROOT, pipeline, batch_size, **kw)


@unittest.skipIf(av is None or not FFMPEG, "needs PyAV (python3-av) and ffmpeg")
class Frames(unittest.TestCase):
    def test_clips_are_pyavs_frames_at_their_times(self):
        start, fps, count = 0.37, 6.0, 8
        # (Batches need a fixed shape: a crop of the whole 192x128 frame.)
        got, labels, _ = run([ops.DecodeVideo(frames=count, fps=fps, sampler="SAMPLER_START",
                                              start=start), WHOLE])
        self.assertEqual(len(got), len(VIDEOS))
        self.assertEqual(labels, [0, 0, 1, 1, 1])
        for path, clip in zip(files(), got):
            frames = pyav_frames(path)
            self.assertEqual(clip.shape, (count,) + frames[0][1].shape, path)
            for i in range(count):
                want = shown_at(frames, start + i / fps)
                np.testing.assert_array_equal(clip[i], want, err_msg=f"{path} frame {i}")

    def test_random_clips_are_a_stride_of_frames_within_the_video(self):
        stride, count = 3, 5
        for index_seed in (1, 2):
            got, _, _ = run([ops.DecodeVideo(frames=count, stride=stride), WHOLE],
                            seed=index_seed)
            for path, clip in zip(files(), got):
                if path.endswith("vfr.mkv"):
                    continue  # its average rate is no frame's step
                images = [image for _, image in pyav_frames(path)]
                first = next(k for k, image in enumerate(images)
                             if np.array_equal(image, clip[0]))
                for i in range(count):
                    np.testing.assert_array_equal(clip[i], images[first + stride * i],
                                                  err_msg=f"{path} frame {i}")


@unittest.skipIf(av is None or torch is None or not FFMPEG,
                 "needs PyAV, torch and torchvision, and ffmpeg")
class Transforms(unittest.TestCase):
    def test_image_ops_on_each_frame_are_torchvisions(self):
        start, fps, count = 0.5, 4.0, 4
        pipeline = [ops.DecodeVideo(frames=count, fps=fps, sampler="SAMPLER_START", start=start),
                    ops.Resize(shorter_side=72), ops.CenterCrop(size=64), ops.Normalize()]
        got, _, _ = run(pipeline, batch_size=2)
        reference = T.Compose([T.Resize(72), T.CenterCrop(64), T.ToTensor(),
                               T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
        for path, clip in zip(files(), got):
            frames = pyav_frames(path)
            want = torch.stack([reference(Image.fromarray(shown_at(frames, start + i / fps)))
                                for i in range(count)]).numpy()
            self.assertEqual(clip.shape, (count, 3, 64, 64), path)
            np.testing.assert_array_equal(clip, want, err_msg=path)

    def test_a_torchvision_compose_after_decode_video_translates(self):
        decode = ops.DecodeVideo(frames=3, fps=5.0, sampler="SAMPLER_START", start=0.2)
        native, _, _ = run([decode, ops.Resize(shorter_side=72), ops.CenterCrop(size=64),
                            ops.Normalize()])
        loader = prepflow.Loader(ROOT, transform=[decode, T.Resize(72), T.CenterCrop(64),
                                                  T.ToTensor(), T.Normalize(
                                                      [0.485, 0.456, 0.406],
                                                      [0.229, 0.224, 0.225])],
                                 batch_size=1, shuffle=False, as_numpy=True)
        translated = [clip for batch in loader.batches() for clip in batch.images]
        loader.close()
        self.assertEqual(len(translated), len(native))
        for a, b in zip(native, translated):
            np.testing.assert_array_equal(a, b)

    def test_uniform_temporal_subsample_is_pytorchvideos(self):
        got, _, _ = run([ops.DecodeVideo(frames=13, sampler="SAMPLER_START"), WHOLE,
                         ops.UniformTemporalSubsample(frames=5)])
        full, _, _ = run([ops.DecodeVideo(frames=13, sampler="SAMPLER_START"), WHOLE])
        for clip, whole in zip(got, full):
            # pytorchvideo.transforms.functional.uniform_temporal_subsample
            indices = torch.clamp(torch.linspace(0, 12, 5), 0, 12).long().numpy()
            np.testing.assert_array_equal(clip, whole[indices])


def write_manifest(name, start=0.3, end=1.7):
    """A CSV manifest of the CFR videos, each labelled by its file's codec
    class and read between start and end seconds."""
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write("path,label,start,end\n")
        for video in files():
            if not video.endswith("vfr.mkv"):
                f.write(f"{video},{pathlib.Path(video).parent.name},{start},{end}\n")
    return path


@unittest.skipIf(av is None or not FFMPEG, "needs PyAV (python3-av) and ffmpeg")
class Manifests(unittest.TestCase):
    def test_clips_per_video_are_spaced_evenly_in_each_window(self):
        start, end, count, stride, clips = 0.3, 1.7, 4, 2, 3
        manifest = write_manifest("train.csv", start, end)
        got, labels, _ = testdata.run_loader(
            manifest, [ops.DecodeVideo(frames=count, stride=stride, sampler="SAMPLER_UNIFORM"),
                       WHOLE], 3, clips_per_video=clips)
        videos = [v for v in files() if not v.endswith("vfr.mkv")]
        self.assertEqual(len(got), clips * len(videos))
        self.assertEqual(labels, [0] * clips + [1] * clips * (len(videos) - 1))
        for n, video in enumerate(videos):
            with av.open(video) as container:
                fps = float(container.streams.video[0].average_rate)
            frames = pyav_frames(video)
            step = stride / fps
            # The last start whose final frame is still shown by the window's end.
            last = start + max(0.0, end - start - 1 / fps - step * (count - 1))
            for k in range(clips):
                first = start + (last - start) * k / (clips - 1)
                clip = got[n * clips + k]
                for i in range(count):
                    np.testing.assert_array_equal(clip[i], shown_at(frames, first + step * i),
                                                  err_msg=f"{video} clip {k} frame {i}")

    def test_torchvisions_video_transforms_translate(self):
        if torch is None:
            self.skipTest("needs torch")
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import torchvision.transforms._transforms_video as TV
        start, fps, count = 0.2, 5.0, 3
        mean, std = [0.43, 0.4, 0.39], [0.23, 0.22, 0.21]
        decode = ops.DecodeVideo(frames=count, fps=fps, sampler="SAMPLER_START", start=start)
        video = [TV.ToTensorVideo(), TV.CenterCropVideo(96), TV.RandomHorizontalFlipVideo(p=1.0),
                 TV.NormalizeVideo(mean, std)]
        loader = prepflow.Loader(ROOT, transform=[decode] + video, batch_size=5, shuffle=False)
        clips, _ = next(iter(loader))
        loader.close()
        self.assertEqual(tuple(clips.shape), (5, 3, count, 96, 96))
        reference = T.Compose(video)
        for path, clip in zip(files(), clips):
            frames = pyav_frames(path)
            raw = torch.from_numpy(np.stack([shown_at(frames, start + i / fps)
                                             for i in range(count)]))
            torch.testing.assert_close(clip, reference(raw), rtol=0, atol=0, msg=path)
        with self.assertRaisesRegex(ValueError, "RandomResizedCropVideo.*interpolate"):
            prepflow.transforms.to_stages([decode, TV.ToTensorVideo(),
                                           TV.RandomResizedCropVideo(64)])
        with self.assertRaisesRegex(ValueError, "after ToTensorVideo"):
            prepflow.transforms.to_stages([decode, TV.CenterCropVideo(64)])


@unittest.skipIf(not FFMPEG, "needs ffmpeg")
class Offload(unittest.TestCase):
    def test_clips_of_a_manifest_on_a_worker_are_the_local_ones(self):
        manifest = write_manifest("offload.csv")
        pipeline = [ops.DecodeVideo(frames=8, stride=1, max_stride=3),
                    ops.RandomTemporalCrop(frames=4), ops.RandomCrop(size=64),
                    ops.Normalize(layout="cnhw")]
        kw = dict(seed=5, clips_per_video=2)
        local, _, st_local = testdata.run_loader(manifest, pipeline, 2, **kw)
        self.assertEqual(local[0].shape, (3, 4, 64, 64))
        with testdata.Worker(BIN, TMP) as worker:
            for offload in ("remote", "cut=1", "cut=2"):
                remote, _, st = testdata.run_loader(manifest, pipeline, 2, offload=offload,
                                                    workers=[worker.address], **kw)
                self.assertEqual(st["checksum"], st_local["checksum"], offload)
                self.assertEqual(st["remote_images"], len(local), offload)
                for a, b in zip(local, remote):
                    np.testing.assert_array_equal(a, b, err_msg=offload)

    def test_every_cut_on_a_worker_gives_the_local_clips(self):
        pipeline = [ops.DecodeVideo(frames=6, stride=2), ops.RandomResizedCrop(size=48),
                    ops.RandomHorizontalFlip(), ops.Normalize()]
        local, _, st_local = run(pipeline, batch_size=2, seed=8)
        self.assertEqual(local[0].shape, (6, 3, 48, 48))
        with testdata.Worker(BIN, TMP) as worker:
            for offload in ("remote", "cut=1", "cut=2", "cut=3"):
                remote, _, st = run(pipeline, batch_size=2, seed=8, offload=offload,
                                    workers=[worker.address])
                self.assertEqual(st["checksum"], st_local["checksum"], offload)
                self.assertEqual(st["remote_images"], len(VIDEOS), offload)
                for a, b in zip(local, remote):
                    np.testing.assert_array_equal(a, b, err_msg=offload)

    def test_batches_are_b_t_c_h_w_tensors(self):
        if torch is None:
            self.skipTest("needs torch")
        loader = prepflow.Loader(ROOT, pipeline=[ops.DecodeVideo(frames=4), ops.Resize(height=64, width=96),
                                                 ops.Normalize()],
                                 batch_size=5, shuffle=False)
        clips, labels = next(iter(loader))
        loader.close()
        self.assertEqual(tuple(clips.shape), (5, 4, 3, 64, 96))
        self.assertEqual(clips.dtype, torch.float32)
        self.assertEqual(labels.tolist(), [0, 0, 1, 1, 1])


if __name__ == "__main__":
    unittest.main()
