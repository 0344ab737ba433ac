"""PixelRecipe is open_clip's evaluation transform without torch (issue 31): its arrays equal open_clip's own
``preprocess`` on real photos of every shape and mode it meets, and it declines the transforms it does not
reproduce, so the caller keeps open_clip's."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from helpers import make_photo

open_clip = pytest.importorskip("open_clip")

from pictrieve.tools.models.embedders.clip_pixels import PixelRecipe  # noqa: E402

VIT_B_32 = {"size": (224, 224), "mode": "RGB", "mean": (0.48145466, 0.4578275, 0.40821073),
            "std": (0.26862954, 0.26130258, 0.27577711), "interpolation": "bicubic", "resize_mode": "shortest",
            "fill_color": 0}


def open_clip_transform(cfg):
    return open_clip.image_transform(cfg["size"], is_train=False, mean=cfg["mean"], std=cfg["std"],
                                     resize_mode=cfg["resize_mode"], interpolation=cfg["interpolation"])


def pictures(folder, flickr=None):
    """Landscape, portrait, smaller than the crop, odd sizes (a crop margin of 3 or 7 pixels: rounding, not
    flooring, centres it), and the modes photos come in."""
    made = [Image.open(make_photo(folder / f"p{i}.png", seed=i, size=size)) for i, size in
            enumerate([(500, 375), (375, 500), (64, 48), (223, 225), (1001, 333), (224, 224), (227, 224), (224, 231)])]
    made += [made[0].convert("L"), made[1].convert("RGBA"), made[2].convert("P"), made[3].convert("CMYK")]
    if flickr is not None:
        made += [Image.open(path) for path in sorted((flickr / "images").glob("*.jpg"))[:4]]
    return made


@pytest.mark.parametrize("cfg", [
    VIT_B_32,
    {**VIT_B_32, "interpolation": "bilinear", "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)},
    {**VIT_B_32, "size": (256, 256)},
    {**VIT_B_32, "resize_mode": "squash", "size": (160, 200)},
], ids=["vit-b-32", "bilinear-half", "256", "squash"])
def test_the_recipe_equals_open_clips_transform(cfg, tmp_path, request):
    flickr = None
    if cfg is VIT_B_32:
        try:
            flickr = request.getfixturevalue("flickr_dir")
        except pytest.skip.Exception:
            flickr = None
    recipe = PixelRecipe.from_preprocess_cfg(cfg)
    assert recipe is not None and PixelRecipe.from_json(recipe.to_json()) == recipe
    transform = open_clip_transform(cfg)
    for picture in pictures(tmp_path, flickr):
        ours = recipe(picture)
        theirs = transform(picture.convert("RGB")).numpy()
        assert ours.shape == theirs.shape == (3, *cfg["size"]) and ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, atol=1e-6, rtol=0, err_msg=f"{picture.mode} {picture.size}")


def test_a_built_models_transform_config_is_reproduced(tmp_path, tiny_clip_embedder):
    """The config open_clip attaches to a built model (what the export stores) gives that model's own transform."""
    from pictrieve.tools.models.embedders.open_clip import checked_recipe

    model, preprocess = tiny_clip_embedder.model, tiny_clip_embedder._torch_parts().preprocess
    recipe = PixelRecipe.from_preprocess_cfg(model.visual.preprocess_cfg)
    picture = Image.open(make_photo(tmp_path / "p.png", seed=3, size=(300, 200)))
    np.testing.assert_allclose(recipe(picture), preprocess(picture).numpy(), atol=1e-6, rtol=0)
    assert checked_recipe(model, preprocess, recipe.size) == recipe
    assert checked_recipe(model, lambda picture: preprocess(picture) * 1.01, recipe.size) is None  # not reproduced


@pytest.mark.parametrize("text", [
    "", "{}", "[1, 2]", '{"size": [224], "resize_mode": "shortest", "interpolation": "bicubic", "mean": [0.5, 0.5, 0.5], '
    '"std": [0.5, 0.5, 0.5]}',
    PixelRecipe((224, 224), "longest", "bicubic", (0.5,) * 3, (0.5,) * 3).to_json(),
    PixelRecipe((224, 224), "shortest", "bicubic", (0.5,) * 3, (0.0,) * 3).to_json(),
    PixelRecipe((224, 200), "shortest", "bicubic", (0.5,) * 3, (0.5,) * 3).to_json(),
])
def test_a_damaged_or_foreign_recipe_is_refused(text):
    with pytest.raises(ValueError):
        PixelRecipe.from_json(text)


@pytest.mark.parametrize("change", [
    {"resize_mode": "longest"}, {"size": (224, 320)}, {"mode": "L"}, {"interpolation": "nearest"}, {"mean": None},
])
def test_transforms_it_does_not_reproduce_are_declined(change):
    assert PixelRecipe.from_preprocess_cfg({**VIT_B_32, **change}) is None
