"""Alanine dipeptide: the torus target beside OpenMM's own Langevin sampling of the same force field (issue 43).

usage: python benchmarks/alanine_md_check.py [--ns 2] [--chains 4] [--temperature 300] [--forcefield amber14-all.xml]
                                            [--relaxed-grid 24] [--seed 0]

Three densities of the backbone torsions (phi, psi) of the bundled ACE-ALA-NME, one force field, vacuum, no cutoff:

- **rigid** (the ``torus`` target, ``relax=false``): :math:`\\exp(-E(\\phi, \\psi)/k_BT)` with every other internal coordinate
  of the bundled (extended) structure held fixed, by quadrature on the 120-point periodic grid;
- **relaxed** (``relax=true``): the adiabatic map, :math:`\\exp(-E_{min}(\\phi, \\psi)/k_BT)` with the other coordinates
  minimised under torsion restraints, on a ``--relaxed-grid`` grid (midpoint rule); no entropy of the other coordinates;
- **MD**: the thermodynamic marginal :math:`p(\\phi, \\psi) \\propto \\int e^{-U(x)/k_BT} \\delta(\\phi(x) - \\phi)\\,
  \\delta(\\psi(x) - \\psi)\\, dx` over all 3N coordinates, from ``--chains`` independent Langevin runs (OpenMM
  ``LangevinMiddleIntegrator``, friction 1/ps, 2 fs steps with X-H bond lengths constrained, ``HBonds``; each chain minimised,
  given Maxwell velocities, 20 ps of burn-in, then ``--ns`` ns sampled every 0.1 ps).

Printed: each density's mass on the Ramachandran basins of :data:`gflownet_measure.environments.alanine.BASINS`, and on 15-degree cells
(24 x 24, whose edges hold the basin boundaries) the JSD (nats) and total variation of the MD histogram against each of the
other two, beside the MD's own noise: the same distances between the histograms of its first and second halves of chains.
Needs the ``molecule`` extra (OpenMM). Figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from gflownet_measure.environments import alanine
from gflownet_measure.environments.torus import TorusConfig
from gflownet_measure.environments.torus_targets import get_target, periodic_grid
from gflownet_measure.experiments.torus import Reference
from gflownet_measure.metrics import grid_jsd, total_variation

CELLS = 24  # 15-degree cells: their edges hold the basin boundaries (multiples of 30 degrees)


def md_torsions(forcefield: str, temperature: float, ns: float, seed: int) -> np.ndarray:
    """``[frames, 2]`` (phi, psi) in radians from one Langevin chain of the full molecule (module docstring)."""
    import openmm
    from openmm import app, unit

    pdb = app.PDBFile(str(alanine.STRUCTURE))
    system = app.ForceField(forcefield).createSystem(pdb.topology, nonbondedMethod=app.NoCutoff, constraints=app.HBonds)
    integrator = openmm.LangevinMiddleIntegrator(temperature * unit.kelvin, 1.0 / unit.picosecond, 0.002 * unit.picoseconds)
    integrator.setRandomNumberSeed(seed + 1)  # 0 would mean a random seed
    context = openmm.Context(system, integrator, openmm.Platform.getPlatformByName("CPU"), {"Threads": "1"})
    context.setPositions(pdb.positions)
    openmm.LocalEnergyMinimizer.minimize(context)
    context.setVelocitiesToTemperature(temperature * unit.kelvin, seed + 1)
    integrator.step(10_000)  # 20 ps burn-in
    where = {(a.residue.name, a.name): a.index for a in pdb.topology.atoms()}
    backbone = [where[key] for key in alanine.BACKBONE]
    stride, frames = 50, int(round(ns * 1000 / 0.1))  # 0.1 ps between frames
    out = np.empty((frames, 2))
    for k in range(frames):
        integrator.step(stride)
        x = context.getState(getPositions=True).getPositions(asNumpy=True).value_in_unit(unit.nanometer)[backbone]
        out[k] = alanine.dihedral(x[:4]), alanine.dihedral(x[1:])
    return out


def histogram(theta: np.ndarray) -> torch.Tensor:
    """Fractions ``[CELLS^2]`` of the angles ``theta [N, 2]`` in the cells of :func:`periodic_grid` (first angle slowest)."""
    idx = np.floor(np.remainder(theta, 2 * math.pi) / (2 * math.pi / CELLS)).astype(int).clip(0, CELLS - 1)
    counts = np.bincount(idx[:, 0] * CELLS + idx[:, 1], minlength=CELLS * CELLS)
    return torch.tensor(counts / counts.sum(), dtype=torch.float64)


def coarse(p: torch.Tensor, G: int) -> torch.Tensor:
    """Cell masses ``[CELLS^2]`` from masses ``p [G^2]`` on the finer periodic grid (G a multiple of CELLS)."""
    k = G // CELLS
    return p.reshape(CELLS, k, CELLS, k).sum((1, 3)).reshape(-1)


def basin_masses(p: torch.Tensor) -> list[float]:
    """Masses of :data:`~gflownet_measure.environments.alanine.BASINS` from cell masses ``p [CELLS^2]`` (cell centres decide)."""
    region = alanine.basin_of(periodic_grid(2, CELLS))
    return [float(p[region == j].sum()) for j in range(len(alanine.BASINS))]


def distances(p: torch.Tensor, q: torch.Tensor) -> str:
    return f"JSD {grid_jsd(p.log(), q.log()):.4f}, TV {total_variation(p, q):.4f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ns", type=float, default=2.0, help="sampled nanoseconds per chain")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--temperature", type=float, default=300.0)
    p.add_argument("--forcefield", default="amber14-all.xml")
    p.add_argument("--relaxed-grid", type=int, default=24, help="points per angle of the relaxed map (a multiple of 24)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.relaxed_grid % CELLS or a.chains < 2:
        p.error(f"--relaxed-grid must be a multiple of {CELLS} and --chains at least 2")
    torch.set_num_threads(1)
    kT = alanine.KB * a.temperature
    t0 = time.perf_counter()
    rigid_log_R = Reference.build(get_target(TorusConfig(target="alanine", temperature=a.temperature, forcefield=a.forcefield)), 120, 0.1).log_R
    rigid = coarse(torch.softmax(rigid_log_R, 0), 120)
    t_rigid = time.perf_counter() - t0
    mol = alanine.Molecule(alanine.STRUCTURE, a.forcefield, relax=True)
    E = torch.tensor(mol.energies(periodic_grid(2, a.relaxed_grid).numpy()))
    relaxed = coarse(torch.softmax(-E / kT, 0), a.relaxed_grid)
    t_relaxed = time.perf_counter() - t0 - t_rigid
    chains = []
    for c in range(a.chains):
        t = time.perf_counter()
        chains.append(md_torsions(a.forcefield, a.temperature, a.ns, a.seed * 1000 + c))
        print(f"chain {c}: {a.ns:g} ns in {time.perf_counter() - t:.0f} s")
    md = histogram(np.concatenate(chains))
    half = a.chains // 2
    first, second = histogram(np.concatenate(chains[:half])), histogram(np.concatenate(chains[half:]))
    per_chain = np.array([basin_masses(histogram(c)) for c in chains])  # [chains, basins]
    print(f"\nalanine dipeptide, {a.forcefield}, vacuum, {a.temperature:g} K; rigid grid {t_rigid:.0f} s, relaxed {a.relaxed_grid}^2 grid {t_relaxed:.0f} s; "
          f"MD {a.chains} chains x {a.ns:g} ns (seed {a.seed}), one thread")
    print(f"{'basin':<14}{'rigid':>9}{'relaxed':>9}{'MD':>9}{'MD s.e.':>9}")
    for j, (name, _, _) in enumerate(alanine.BASINS):
        se = per_chain[:, j].std(ddof=1) / math.sqrt(a.chains)
        print(f"{name:<14}{basin_masses(rigid)[j]:>9.4f}{basin_masses(relaxed)[j]:>9.4f}{basin_masses(md)[j]:>9.4f}{se:>9.4f}")
    print(f"\n15-degree cells: MD vs rigid: {distances(md, rigid)}; MD vs relaxed: {distances(md, relaxed)}; "
          f"MD noise (chains 1-{half} vs {half + 1}-{a.chains}): {distances(first, second)}")
    print("lowest energy per basin above the surface's minimum (kJ/mol), and where (phi, psi in degrees):")
    for name, energy, G in (("rigid", -rigid_log_R * kT, 120), ("relaxed", E - E.min(), a.relaxed_grid)):
        points = periodic_grid(2, G)
        region = alanine.basin_of(points)
        lows = []
        for j, (basin, _, _) in enumerate(alanine.BASINS):
            i = int(torch.where(region == j, energy, torch.inf).argmin())
            deg = (np.degrees(points[i].numpy()) + 180) % 360 - 180
            lows.append(f"{basin} {float(energy[i]):.1f} at ({deg[0]:.1f}, {deg[1]:.1f})")
        print(f"  {name}: " + "; ".join(lows))
    for name, q in (("rigid", rigid), ("relaxed", relaxed), ("MD", md)):
        i = int(q.argmax())
        deg = np.degrees(periodic_grid(2, CELLS)[i].numpy())
        print(f"{name} mode cell centre (phi, psi) = ({(deg[0] + 180) % 360 - 180:.1f}, {(deg[1] + 180) % 360 - 180:.1f}) deg")


if __name__ == "__main__":
    main()
