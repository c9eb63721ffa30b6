"""Export a model, then send its serving signature hostile bytes; print outcomes and memory.

Run as a subprocess so the process's peak memory (ru_maxrss) belongs to this
test alone.
"""

import json
import resource
import sys

import tensorflow as tf

from tests.reliability import hostile, image_modes
from training.export import export_serving_model
from training.model import build_model

path = sys.argv[1]
labels = ["a", "../b", "c/d", "ñandú"]
export_serving_model(
    build_model("small_cnn", 32, len(labels)), path, label_names=labels, image_size=32, metadata={}
)
serve = tf.saved_model.load(path).signatures["serving_default"]
odd = hostile.odd_files()
good = serve(images=tf.constant([odd["progressive.jpg"], odd["rgba.png"]]))
empty = serve(images=tf.constant([], tf.string))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
outcomes = {}
odd["gif_frame_bomb.gif"] = hostile.gif_frame_bomb()
# Its header is whole (the size reads fine), its image data ends early: the decoder fails.
odd["cut.jpg"] = hostile.encode(hostile.noise(64, 48), "JPEG")[:700]
for name in (
    "bomb.png",
    "bomb.jpg",
    "bomb.gif",
    "gif_frame_bomb.gif",
    "text.jpg",
    "tiff.tif",
    "truncated.jpg",
    "cut.jpg",
):
    try:
        serve(images=tf.constant([odd["progressive.jpg"], odd[name]]))
        outcomes[name] = "served"
    except tf.errors.InvalidArgumentError as err:
        outcomes[name] = " ".join(err.message.split())[:600]
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
# Every mode x transparency kind a file can store: served, or refused cleanly; any other
# exception is a crash of the serving function.
modes = {}
for name, (data, _) in sorted(image_modes.files().items()):
    try:
        answer = serve(images=tf.constant([odd["progressive.jpg"], data]))
        modes[name] = f"served {answer['probabilities'].shape[0]}"
    except tf.errors.InvalidArgumentError as err:
        modes[name] = "refused: " + " ".join(err.message.split())[:300]
    except Exception as err:
        modes[name] = f"crash: {type(err).__name__}: {err}"[:300]
print(
    json.dumps(
        {
            "good_class_names": [n.decode() for n in good["class_name"].numpy()],
            "empty_shapes": {k: list(v.shape) for k, v in empty.items()},
            "outcomes": outcomes,
            "modes": modes,
            "peak_growth_kb": after - before,
        }
    )
)
