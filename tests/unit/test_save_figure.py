"""Every figure is written through server.plots.save_figure: whole or not at all."""

import pytest

from server.plots import plt, save_figure

PNG = b"\x89PNG\r\n\x1a\n"


def test_writes_a_png_into_a_new_folder_and_closes_the_figure(tmp_path) -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "new" / "fig.png", dpi=50)
    assert path.read_bytes().startswith(PNG)
    assert not plt.fignum_exists(fig.number)
    assert [p.name for p in path.parent.iterdir()] == ["fig.png"]


def test_a_failed_save_leaves_the_old_figure_and_no_part_file(
    tmp_path, monkeypatch
) -> None:
    path = tmp_path / "fig.png"
    path.write_bytes(PNG + b"old")
    fig, _ = plt.subplots()

    def broken(target, **kwargs):
        with open(target, "wb") as out:
            out.write(PNG)  # half a file, then the failure
        raise OSError("disk full")

    monkeypatch.setattr(fig, "savefig", broken)
    with pytest.raises(OSError, match="disk full"):
        save_figure(fig, path)
    assert path.read_bytes() == PNG + b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]
    assert not plt.fignum_exists(fig.number)
