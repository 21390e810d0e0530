"""Alanine dipeptide (the torus's ``alanine`` target): torsions set by rigid rotation, the Ramachandran basins of the amber14
energy surface where they belong, periodic interpolation, and one-line errors for bad structures, force fields and a missing OpenMM."""
import math

import numpy as np
import pytest
import torch

from gflownet_measure.environments import alanine, torus
from gflownet_measure.environments.torus_targets import periodic_grid

openmm = pytest.importorskip("openmm", reason="the molecule extra (OpenMM) is not installed")


@pytest.fixture(scope="module")
def molecule():
    return alanine.Molecule(alanine.STRUCTURE, "amber14-all.xml", relax=False)


def test_rigid_rotation_sets_the_torsions_and_keeps_bond_lengths(molecule):
    """The torsions come out as asked (to round-off) and no bond changes length (a rigid rotation about the bond itself)."""
    x0 = molecule.x0
    for phi, psi in [(-1.4, 1.0), (2.5, -3.0), (0.0, 0.0)]:
        x = molecule.conformation(phi, psi)
        assert alanine.dihedral(x[molecule.backbone[:4]]) == pytest.approx(phi, abs=1e-9)
        assert alanine.dihedral(x[molecule.backbone[1:]]) == pytest.approx(psi, abs=1e-9)
        d = lambda y: np.linalg.norm(y[:, None] - y[None], axis=-1)  # noqa: E731
        n = len(x0)
        bonded = d(x0) < 0.16  # nm: every covalent bond of the molecule, no non-bonded pair
        assert np.abs(d(x) - d(x0))[bonded & ~np.eye(n, dtype=bool)].max() < 1e-9


def _wrapped_deg(a):
    return (a + 180.0) % 360.0 - 180.0


def test_the_basins_are_where_they_belong(molecule):
    """On the rigid-rotation surface (10-degree grid) beta is the global minimum near (-155, 155) and C7eq a local one near (-85, 65);
    free minimisation (all coordinates) from the C7eq, beta and alpha_L starting points ends in C7eq near (-75, 54) (measured; the
    relaxed minimum is about (-80, 50)), beta near (-152, 160) and alpha_L near (61, -41). In vacuum alpha_R is no minimum of amber14:
    started at (-70, -40) the minimiser also ends in C7eq. Tolerances 15 degrees: the grid spacing plus the basins' widths."""
    G = 36
    theta = periodic_grid(2, G).numpy()
    E = molecule.energies(theta).reshape(G, G)
    deg = _wrapped_deg(np.degrees(theta)).reshape(G, G, 2)
    assert np.abs(_wrapped_deg(deg.reshape(-1, 2)[E.argmin()] - [-155, 155])).max() <= 15
    lower = np.ones_like(E, dtype=bool)
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            if di or dj:
                lower &= E < np.roll(np.roll(E, di, 0), dj, 1)
    minima = deg[lower]
    assert any(np.abs(_wrapped_deg(m - [-85, 65])).max() <= 15 for m in minima), minima
    for start, end in [((-80, 60), (-75, 54)), ((-150, 150), (-152, 160)), ((60, -60), (61, -41)), ((-70, -40), (-75, 54))]:
        molecule.context.setPositions(molecule.conformation(*np.radians(start)) * molecule.unit.nanometer)
        openmm.LocalEnergyMinimizer.minimize(molecule.context, 1e-3, 5000)
        x = np.array(molecule.context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(molecule.unit.nanometer))
        got = np.degrees([alanine.dihedral(x[molecule.backbone[:4]]), alanine.dihedral(x[molecule.backbone[1:]])])
        assert np.abs(_wrapped_deg(got - end)).max() <= 15, (start, got)
        assert alanine.basin_of(torch.tensor(np.radians(got))[None]).item() == alanine.basin_of(torch.tensor(np.radians(end), dtype=torch.float64)[None]).item()


def test_periodic_cubic_is_exact_at_nodes_and_on_quadratics_across_the_seam():
    """Catmull-Rom reproduces its nodes (to round-off), and is continuous across the seam theta = 0 = 2 pi (periodic)."""
    G = 16
    nodes = periodic_grid(2, G)
    grid = torch.cos(nodes[:, 0]) + torch.sin(2 * nodes[:, 1])
    assert torch.allclose(alanine.periodic_cubic(grid.reshape(G, G), nodes), grid, atol=1e-12)
    a = torch.tensor([[1e-9, 1.0], [2 * math.pi - 1e-9, 1.0]], dtype=torch.float64)
    v = alanine.periodic_cubic(grid.reshape(G, G), a)
    assert float((v[0] - v[1]).abs()) < 1e-6


def test_bad_molecule_inputs_are_one_line_errors(tmp_path):
    pdb = tmp_path / "no_backbone.pdb"
    pdb.write_text("".join(line + "\n" for line in alanine.STRUCTURE.read_text().splitlines() if " CA " not in line))
    for bad, message in [({"structure": str(pdb)}, "backbone"), ({"forcefield": "no-such-forcefield.xml"}, "forcefield"), ({"n_dim": 3}, "two angles"), ({"structure": str(tmp_path / "missing.pdb")}, "not a file")]:
        with pytest.raises(ValueError, match=message) as e:
            torus.TorusConfig(target="alanine", **bad)
        assert "\n" not in str(e.value)


def test_missing_openmm_names_the_extra(monkeypatch):
    """With OpenMM unimportable the settings fail with one line naming the extra to install."""
    import builtins

    real = builtins.__import__

    def no_openmm(name, *args, **kwargs):
        if name == "openmm" or name.startswith("openmm."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_openmm)
    with pytest.raises(ValueError, match=r"gflownet-measure\[molecule\]"):
        torus.TorusConfig(target="alanine")
