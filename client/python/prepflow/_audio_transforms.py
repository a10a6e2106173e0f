"""torchaudio transforms in, prepflow stages out (used by prepflow.transforms).

    import torch, torchaudio.transforms as AT
    transform = torch.nn.Sequential(
        AT.Resample(44100, 16000), AT.MelSpectrogram(16000, n_mels=80),
        AT.AmplitudeToDB(top_db=80), AT.FrequencyMasking(27), AT.TimeMasking(40))
    loader = prepflow.Loader("train.jsonl", transform=transform)

A pipeline starts with `decode_audio` (what torchaudio.load does) and, since a
batch needs one channel count, `downmix` (waveform.mean(0, keepdim=True),
which mono files pass unchanged). Each
transform's parameters are read from the object, after torchaudio's own
checks. `Resample` converts from each file's own rate (torchaudio assumes
`orig_freq`), and `MelSpectrogram` builds its filterbank for the rate the
audio has (torchaudio for `sample_rate`): the same where the files are at
the rates the transforms name, which a preceding Resample makes sure of.
"""
import math

from . import ops

# The transforms that translate, by class name.
AUDIO_TRANSLATED = ("Resample", "Spectrogram", "MelSpectrogram", "AmplitudeToDB", "MFCC", "FrequencyMasking",
                    "TimeMasking", "Vol", "Preemphasis", "TimeStretch", "MelScale", "Vad")

_NOT_NATIVE = {
    "SlidingWindowCmn": "prepflow has per-utterance CMVN (ops.UtteranceCmvn), not a sliding "
                        "window",
}


class Untranslatable(ValueError):
    pass


def is_torchaudio(t):
    return type(t).__module__.startswith("torchaudio.")


def _resample(t):
    method = {"sinc_interpolation": "METHOD_SINC_HANN", "sinc_interp_hann": "METHOD_SINC_HANN",
              "kaiser_window": "METHOD_SINC_KAISER",
              "sinc_interp_kaiser": "METHOD_SINC_KAISER"}.get(t.resampling_method)
    if method is None:
        raise Untranslatable(f"resampling_method {t.resampling_method!r}")
    fields = dict(rate=int(t.new_freq), lowpass_filter_width=int(t.lowpass_filter_width),
                  rolloff=float(t.rolloff), method=method)
    if method == "METHOD_SINC_KAISER" and t.beta is not None:
        fields["beta"] = float(t.beta)
    return [ops.Resample(**fields)]


def _check_stft(spec, op, more=()):
    """Refuses a torchaudio Spectrogram that is not the STFT prepflow's op
    computes, naming the field."""
    import torch
    why = [(spec.pad != 0, "pad"), (spec.normalized, "normalized"), (not spec.center, "center"),
           (spec.pad_mode != "reflect", "pad_mode"), (not spec.onesided, "onesided"),
           (not torch.equal(spec.window, torch.hann_window(spec.win_length)), "window_fn")]
    for bad, field in why + list(more):
        if bad:
            raise Untranslatable(f"{field}: prepflow's {op} has torchaudio's defaults there "
                                 f"(a centred, reflect-padded, one-sided Hann STFT)")


def _spectrogram(t):
    """Spectrogram; with power=None the complex spectrum, as [..., 2] (what
    torch.view_as_real gives)."""
    _check_stft(t, "spectrogram")
    if t.power is None:
        return [ops.Spectrogram(n_fft=int(t.n_fft), win_length=int(t.win_length),
                                hop_length=int(t.hop_length), complex=True)]
    return [ops.Spectrogram(n_fft=int(t.n_fft), win_length=int(t.win_length),
                            hop_length=int(t.hop_length), power=float(t.power))]


def _time_stretch(t):
    """TimeStretch with its fixed_rate (a rate per call does not translate:
    ops.TimeStretch(rate_min=..., rate_max=...) draws one per sample). Its
    complex output is [..., 2] (torch.view_as_real); torchaudio's users take
    its magnitude in Python, prepflow's with ops.Magnitude() in the list."""
    if t.fixed_rate is None:
        raise Untranslatable("no fixed_rate (the rate is given per call); use "
                             "prepflow.ops.TimeStretch(rate_min=..., rate_max=...) for a rate "
                             "drawn per sample")
    hop = float(t.phase_advance[-1, 0]) / math.pi  # linspace(0, pi * hop, bins)
    return [ops.TimeStretch(hop_length=int(round(hop)), fixed_rate=float(t.fixed_rate))]


def _mel_scale(t):
    if t.norm not in (None, "slaney") or t.mel_scale not in ("htk", "slaney"):
        raise Untranslatable("norm and mel_scale: None/'slaney' and 'htk'/'slaney'")
    return [ops.MelScale(n_mels=int(t.n_mels), sample_rate=int(t.sample_rate),
                         f_min=float(t.f_min), f_max=float(t.f_max),
                         slaney_scale=t.mel_scale == "slaney", slaney_norm=t.norm == "slaney")]


def _mel_spectrogram(t):
    spec, mel = t.spectrogram, t.mel_scale
    _check_stft(spec, "mel_spectrogram", [(mel.norm not in (None, "slaney"), "norm"),
                                          (mel.mel_scale not in ("htk", "slaney"), "mel_scale")])
    return [ops.MelSpectrogram(n_fft=int(spec.n_fft), win_length=int(spec.win_length),
                               hop_length=int(spec.hop_length), f_min=float(mel.f_min),
                               f_max=float(mel.f_max), n_mels=int(mel.n_mels),
                               power=float(spec.power), slaney_scale=mel.mel_scale == "slaney",
                               slaney_norm=mel.norm == "slaney")]


def _amplitude_to_db(t):
    if t.amin != 1e-10 or t.ref_value != 1.0:
        raise Untranslatable("amin and ref_value must be torchaudio's (1e-10, 1.0)")
    return [ops.AmplitudeToDb(magnitude=t.stype == "magnitude",
                              top_db=0.0 if t.top_db is None else float(t.top_db))]


def _mfcc(t):
    """MFCC: its mel spectrogram, then amplitude_to_db (top_db 80) or, with
    log_mels, log(x + 1e-6), then the DCT."""
    if t.dct_type != 2:
        raise Untranslatable(f"dct_type {t.dct_type}: torchaudio supports only 2")
    stages = _mel_spectrogram(t.MelSpectrogram)
    if t.log_mels:
        stages.append(ops.Log(offset=1e-6))
    else:
        stages.extend(_amplitude_to_db(t.amplitude_to_DB))
    return stages + [ops.Dct(n_mfcc=int(t.n_mfcc), ortho=t.norm == "ortho")]


def _preemphasis(t):
    """torchaudio 2.x's transforms.Preemphasis (0.13 has none: ops.Preemphasis)."""
    return [ops.Preemphasis(coeff=float(t.coeff))]


def _masking(t):
    # iid_masks: torchaudio draws masks per example only for a batch (4-D);
    # a sample ([channels, freq, time]) gets one mask either way.
    if type(t).__name__ == "FrequencyMasking":
        return [ops.FrequencyMasking(freq_mask_param=int(t.mask_param))]
    return [ops.TimeMasking(time_mask_param=int(t.mask_param), p=float(t.p))]


def _vol(t):
    kind = {"amplitude": "GAIN_TYPE_AMPLITUDE", "power": "GAIN_TYPE_POWER",
            "db": "GAIN_TYPE_DB"}[t.gain_type]
    return [ops.Vol(gain=float(t.gain), gain_type=kind)]


_VAD_FIELDS = ("trigger_level", "trigger_time", "search_time", "allowed_gap", "pre_trigger_time",
               "boot_time", "noise_up_time", "noise_down_time", "noise_reduction_amount",
               "measure_freq", "measure_smooth_time", "hp_filter_freq", "lp_filter_freq",
               "hp_lifter_freq", "lp_lifter_freq")


def _vad(t):
    """transforms.Vad: its detector at the audio's own rate (torchaudio's is
    `sample_rate`), trimming the front only, as it does."""
    fields = {name: float(getattr(t, name)) for name in _VAD_FIELDS}
    if t.measure_duration is not None:
        fields["measure_duration"] = float(t.measure_duration)
    return [ops.Vad(**fields)]


_TRANSLATORS = {"Resample": _resample, "MelSpectrogram": _mel_spectrogram,
                "Spectrogram": _spectrogram,
                "AmplitudeToDB": _amplitude_to_db, "FrequencyMasking": _masking,
                "TimeMasking": _masking, "Vol": _vol, "MFCC": _mfcc,
                "Preemphasis": _preemphasis, "TimeStretch": _time_stretch,
                "MelScale": _mel_scale, "Vad": _vad}


def _translate(t):
    """t's stages; Untranslatable saying why not."""
    name = type(t).__name__
    if not is_torchaudio(t) or name not in _TRANSLATORS:
        raise Untranslatable(_NOT_NATIVE.get(name, "prepflow has no equivalent"))
    return _TRANSLATORS[name](t)


def _prefix(items):
    """(stages, i, why): the stages for items[:i], the longest prefix that
    translates, and why items[i] does not (None when every one does)."""
    stages = [ops.DecodeAudio(), ops.Downmix()]
    for i, t in enumerate(items):
        if isinstance(t, ops.Op):
            stages.append(t)
            continue
        try:
            stages.extend(_translate(t))
        except Untranslatable as e:
            return stages, i, e
    return stages, len(items), None


def split(items):
    """(stages, tail): the stages for the longest prefix of `items` that
    translates, and the rest (a list, empty when all translate): what
    Loader(python_tail=...) runs in Python, on each waveform (or features)
    at its own length."""
    stages, i, _ = _prefix(items)
    if any(isinstance(x, ops.Op) for x in items[i:]):
        raise ValueError(f"transform: prepflow.ops objects cannot follow "
                         f"{type(items[i]).__name__}, which runs in Python (the tail)")
    return stages, list(items[i:])


def to_stages(items):
    """The stages for `items` (torchaudio transforms and prepflow.ops, in
    order): decode_audio, downmix, then each. ValueError naming the first
    that does not translate."""
    stages, i, why = _prefix(items)
    if why is not None:
        raise ValueError(
            f"transform: cannot translate {type(items[i]).__name__} (item {i + 1} of "
            f"{len(items)}): {why}. prepflow translates torchaudio's "
            f"{', '.join(AUDIO_TRANSLATED)}, and prepflow.ops objects (docs/audio.md)")
    return stages
