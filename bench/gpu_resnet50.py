"""ResNet-50 training speed on one accelerator, against the published A100 anchor.

    KERAS_BACKEND=jax python -m bench.gpu_resnet50 [--seconds 120] [--batch 256]

Issue #10 asks for images/s of ResNet-50 training on a GPU next to NVIDIA's A100
figure (2,375 images/s, TensorFlow with AMP and XLA, batch 256). The GPU machines
this project can borrow carry JAX but no TensorFlow, and cannot install it (no
network; TensorFlow's wheel is ten times the size that may be carried there), so
this measures the same Keras 3 architecture (`keras.applications.ResNet50`, what
`--architecture resnet50` builds) on Keras' JAX backend: one jit-compiled step
(forward, backward, SGD with momentum), bfloat16 compute with float32 weights,
input generated on the device, so no host work is timed. It is the model's
ceiling on that chip, i.e. how many images/s an input pipeline must feed each
accelerator; the project's tf.data pipeline is measured on CPU by `make bench`.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

A100_ANCHOR = 2375.0  # images/s, ResNet-50 v1.5 training, TF AMP + XLA, one A100 80 GB


def measure(seconds: float, batch: int, image_size: int, precision: str) -> dict:
    import jax
    import keras

    if keras.backend.backend() != "jax":
        raise SystemExit("run with KERAS_BACKEND=jax (the loop below is JAX's)")
    keras.mixed_precision.set_global_policy(precision)
    model = keras.applications.ResNet50(
        weights=None, input_shape=(image_size, image_size, 3), classes=1000
    )
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    def loss_and_state(trainable, non_trainable, images, labels):
        predictions, non_trainable = model.stateless_call(
            trainable, non_trainable, images, training=True
        )
        return loss_fn(labels, predictions), non_trainable

    gradients = jax.value_and_grad(loss_and_state, has_aux=True)

    def train_step(state, images, labels):
        trainable, non_trainable, optimizer_variables = state
        (loss, non_trainable), grads = gradients(trainable, non_trainable, images, labels)
        trainable, optimizer_variables = optimizer.stateless_apply(
            optimizer_variables, grads, trainable
        )
        return loss, (trainable, non_trainable, optimizer_variables)

    step = jax.jit(train_step, donate_argnums=0)
    key_images, key_labels = jax.random.split(jax.random.PRNGKey(0))
    images = jax.random.uniform(key_images, (batch, image_size, image_size, 3))
    labels = jax.random.randint(key_labels, (batch,), 0, 1000)
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )
    started = time.perf_counter()
    for _ in range(3):  # compile, then settle
        loss, state = step(state, images, labels)
    loss.block_until_ready()
    compile_seconds = time.perf_counter() - started
    steps, started = 0, time.perf_counter()
    while True:
        for _ in range(10):  # queue 10 steps, then wait: no host sync per step
            loss, state = step(state, images, labels)
        loss.block_until_ready()
        steps += 10
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            break
    rate = steps * batch / elapsed
    return {
        "device": str(jax.devices()[0].device_kind),
        "backend": f"keras {keras.__version__} on jax {jax.__version__}",
        "python": platform.python_version(),
        "model": "keras.applications.ResNet50 (weights=None, 1000 classes)",
        "precision": precision,
        "batch": batch,
        "image_size": image_size,
        "compile_and_warmup_s": round(compile_seconds, 1),
        "timed_s": round(elapsed, 1),
        "steps": steps,
        "final_loss": float(loss),
        "images_per_second": round(rate, 1),
        "a100_anchor_images_per_second": A100_ANCHOR,
        "ratio_vs_a100_anchor": round(rate / A100_ANCHOR, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_resnet50", description=__doc__)
    parser.add_argument("--seconds", type=float, default=120.0, help="Timed training time.")
    parser.add_argument("--batch", type=int, default=256, help="Images per step.")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--precision", default="mixed_bfloat16", help="Keras dtype policy.")
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    result = measure(args.seconds, args.batch, args.image_size, args.precision)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
