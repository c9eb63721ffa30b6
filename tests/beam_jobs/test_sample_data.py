import glob
import hashlib
import os

from PIL import Image

from beam_jobs import sample_data


def _digests(root):
    return {
        os.path.relpath(p, root): hashlib.sha256(open(p, "rb").read()).hexdigest()
        for p in glob.glob(os.path.join(root, "*", "*"))
    }


def test_layout_formats_and_sizes(tmp_path):
    paths = sample_data.generate(
        str(tmp_path), images_per_class=8, seed=1, min_size=40, max_size=90
    )
    assert len(paths) == 8 * len(sample_data.CLASSES)
    assert sorted(os.listdir(tmp_path)) == sorted(sample_data.CLASSES)
    formats, sizes = set(), set()
    for path in paths:
        with Image.open(path) as image:
            image.load()
            formats.add(image.format)
            sizes.add(image.size)
            assert min(image.size) >= 40 and max(image.size) <= 90
            expected = "PNG" if path.endswith(".png") else "JPEG"
            assert image.format == expected
    assert formats == {"JPEG", "PNG"}
    assert len(sizes) > 10  # varied image sizes


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    sample_data.generate(str(tmp_path / "a"), images_per_class=3, seed=5)
    sample_data.generate(str(tmp_path / "b"), images_per_class=3, seed=5)
    sample_data.generate(str(tmp_path / "c"), images_per_class=3, seed=6)
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    assert _digests(tmp_path / "a") != _digests(tmp_path / "c")


def test_cli(tmp_path, capsys):
    assert sample_data.main([str(tmp_path), "--images-per-class", "2", "--with-corrupt"]) == 0
    assert "wrote 8 images in 4 classes and 4 corrupt files" in capsys.readouterr().out
