"""Alanine dipeptide on the torus of its backbone torsions (Lahlou et al. 2023, section 4.3): a Boltzmann reward from OpenMM.

.. math:: R(\\phi, \\psi) = \\exp\\big(-(E(\\phi, \\psi) - E_{min}) / k_B T\\big)

w.r.t. Haar measure on :math:`[0, 2\\pi)^2`, with :math:`\\phi` = C(ACE)-N-CA-C and :math:`\\psi` = N-CA-C-N(NME), and :math:`E` the
potential energy of the molecule (an OpenMM force field, vacuum, no cutoff, no constraints) at those torsions. The torsions are
set by rigid rotation of the bundled structure (ACE-ALA-NME from openmmtools, ``gflownet_measure/environments/data``): the atoms on the CA side of
the N-CA bond turn about it to set :math:`\\phi`, those on the C side of CA-C about that bond to set :math:`\\psi`, all other
internal coordinates fixed (the paper's protocol); with ``relax`` the other coordinates are then minimised under harmonic
restraints on the two torsions (10^5 kJ/mol/rad^2), and :math:`E` is the unrestrained energy there. :math:`E_{min}` is the
lowest energy of the training grid (a constant factor of R).

Training reads a cached periodic grid (``grid`` points per angle at :math:`2\\pi(j + 1/2)/G`) of exact energies through periodic
Catmull-Rom interpolation of :math:`\\log R`, the energies capped at :math:`E_{min} + 40\\, k_B T` (states with probability below
:math:`e^{-40}`; the cap keeps the interpolant from ringing off rigid-rotation clashes of :math:`10^4` kJ/mol). Evaluation
(:attr:`~gflownet_measure.environments.torus_base.TorusTarget.log_reward_exact`) computes exact energies. The interpolation error is measured
at the grid's cell corners, the points farthest from its nodes, and reported in the target's ``info``.

OpenMM is the ``molecule`` extra (``pip install 'gflownet-measure[molecule]'``); everything else works without it.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gflownet_measure.metrics import grid_jsd

from .torus_base import TorusTarget, check_log_reward_grid, periodic_grid

__all__ = ["STRUCTURE", "BACKBONE", "BASINS", "KB", "ENERGY_CAP", "validate", "dihedral", "Molecule", "periodic_cubic", "basin_of", "target"]

STRUCTURE = Path(__file__).parent / "data" / "alanine-dipeptide.pdb"
BACKBONE = (("ACE", "C"), ("ALA", "N"), ("ALA", "CA"), ("ALA", "C"), ("NME", "N"))  # phi = atoms 0-3, psi = atoms 1-4
KB = 0.0083144626  # Boltzmann constant times Avogadro's number, kJ/mol/K (CODATA 2018)
ENERGY_CAP = 40.0  # k_B T above the grid minimum at which training energies are capped (module docstring)
RESTRAINT = 1e5  # kJ/mol/rad^2 on each torsion when relaxing
INSTALL = "the alanine target needs OpenMM: pip install 'gflownet-measure[molecule]' (or pip install openmm)"

# Ramachandran basins, (name, phi range, psi ranges) in degrees on [-180, 180): boundaries on multiples of 30 degrees, so the
# evaluation grid's 3-degree cells hold them exactly. C7eq (phi ~ -80, psi ~ +70) and beta (phi ~ -150, psi ~ +150) share the
# upper-left half (psi from 0 to 240), split at phi = -120; alpha_R (phi ~ -70, psi ~ -40) below psi = 0; alpha_L / C7ax on the right (phi > 0).
BASINS = (
    ("C7eq", (-120, 0), ((0, 180), (-180, -120))),
    ("beta", (-180, -120), ((0, 180), (-180, -120))),
    ("alpha_R", (-180, 0), ((-120, 0),)),
    ("alpha_L_C7ax", (0, 180), ((-180, 180),)),
)


def _backbone_in(path: Path) -> set[tuple[str, str]]:
    """The (residue, atom) names of the ATOM / HETATM records of a PDB file (columns 18-20 and 13-16)."""
    found = set()
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("ATOM", "HETATM")):
            found.add((line[17:20].strip(), line[12:16].strip()))
    return found


def _structure(config) -> Path:
    return Path(config.structure) if config.structure else STRUCTURE


def validate(config) -> None:
    """One-line ``ValueError`` for settings the molecule cannot use: two angles, a readable structure with the five backbone atoms,
    OpenMM installed, a force field it can find."""
    if config.n_dim != 2:
        raise ValueError(f"target alanine has two angles (phi, psi); got n_dim={config.n_dim}")
    path = _structure(config)
    if not path.is_file():
        raise ValueError(f"structure={path} is not a file")
    missing = [f"{a}({r})" for r, a in BACKBONE if (r, a) not in _backbone_in(path)]
    if missing:
        raise ValueError(f"structure={path} lacks the backbone atoms {', '.join(missing)} (ACE-ALA-NME needed for phi and psi)")
    try:
        from openmm import app
    except ImportError:
        raise ValueError(INSTALL) from None
    try:
        app.ForceField(config.forcefield)
    except Exception as e:  # OpenMM raises ValueError("Could not locate file ...") or a parse error
        raise ValueError(
            f"forcefield={config.forcefield!r} cannot be loaded by OpenMM ({str(e).splitlines()[0][:100]}); e.g. amber14-all.xml, amber99sbildn.xml"
        ) from None


def dihedral(p: np.ndarray) -> np.ndarray:
    """The torsion angle ``[...]`` (radians, IUPAC sign) of four points ``p [..., 4, 3]``."""
    b0, b1, b2 = p[..., 0, :] - p[..., 1, :], p[..., 2, :] - p[..., 1, :], p[..., 3, :] - p[..., 2, :]
    b1n = b1 / np.linalg.norm(b1, axis=-1, keepdims=True)
    v = b0 - (b0 * b1n).sum(-1, keepdims=True) * b1n
    w = b2 - (b2 * b1n).sum(-1, keepdims=True) * b1n
    return np.arctan2((np.cross(b1n, v) * w).sum(-1), (v * w).sum(-1))


def _rotate(x: np.ndarray, origin: np.ndarray, axis: np.ndarray, angle: float) -> np.ndarray:
    """Points ``x [m, 3]`` turned by ``angle`` about the line through ``origin`` along ``axis`` (Rodrigues' formula)."""
    k = axis / np.linalg.norm(axis)
    y = x - origin
    c, s = math.cos(angle), math.sin(angle)
    return origin + y * c + np.cross(k, y) * s + np.outer(y @ k, k) * (1 - c)


class Molecule:
    """An OpenMM system of the structure in vacuum (no cutoff, no constraints) and the rigid torsion moves of the module docstring."""

    def __init__(self, structure: Path, forcefield: str, relax: bool):
        try:
            import openmm
            from openmm import app, unit
        except ImportError:
            raise ValueError(INSTALL) from None
        self.unit, self.openmm, self.relax = unit, openmm, relax
        pdb = app.PDBFile(str(structure))
        system = app.ForceField(forcefield).createSystem(pdb.topology, nonbondedMethod=app.NoCutoff, constraints=None)
        atoms = list(pdb.topology.atoms())
        where = {(a.residue.name, a.name): a.index for a in atoms}
        self.backbone = [where[key] for key in BACKBONE]
        bonds = [(b[0].index, b[1].index) for b in pdb.topology.bonds()]
        n_ace, n_ala, ca, c, n_nme = self.backbone
        self.phi_side = self._side(bonds, len(atoms), (n_ala, ca), ca)
        self.psi_side = self._side(bonds, len(atoms), (ca, c), c)
        self.x0 = np.array(pdb.getPositions(asNumpy=True).value_in_unit(unit.nanometer), dtype=np.float64)  # [atoms, 3]
        if relax:
            torsion = openmm.CustomTorsionForce("0.5*k*d^2; d = min(a, 2*pi - a); a = abs(theta - theta0); pi = 3.141592653589793")
            torsion.addGlobalParameter("k", RESTRAINT)
            torsion.addPerTorsionParameter("theta0")
            self.restraints = (torsion.addTorsion(*self.backbone[:4], [0.0]), torsion.addTorsion(*self.backbone[1:], [0.0]))
            torsion.setForceGroup(1)
            system.addForce(torsion)
            self.torsion = torsion
        platform = openmm.Platform.getPlatformByName("CPU")
        self.context = openmm.Context(system, openmm.VerletIntegrator(0.001), platform, {"Threads": "1"})

    @staticmethod
    def _side(bonds: list[tuple[int, int]], n: int, cut: tuple[int, int], start: int) -> np.ndarray:
        """The atoms joined to ``start`` once the bond ``cut`` is removed (the part a torsion about that bond turns)."""
        nbr: dict[int, list[int]] = {i: [] for i in range(n)}
        for a, b in bonds:
            if {a, b} != set(cut):
                nbr[a].append(b)
                nbr[b].append(a)
        seen, todo = {start}, [start]
        while todo:
            for j in nbr[todo.pop()]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        if cut[0] in seen:
            raise ValueError(f"the bond {cut} lies on a ring: a torsion about it cannot be set by a rigid rotation")
        return np.array(sorted(seen))

    def conformation(self, phi: float, psi: float) -> np.ndarray:
        """Positions ``[atoms, 3]`` (nm) of the structure with its torsions set to ``(phi, psi)`` (radians) by rigid rotation."""
        x = self.x0.copy()
        _, n_ala, ca, c, _ = self.backbone
        turn = phi - float(dihedral(x[self.backbone[:4]]))
        x[self.phi_side] = _rotate(x[self.phi_side], x[n_ala], x[ca] - x[n_ala], turn)
        turn = psi - float(dihedral(x[self.backbone[1:]]))
        x[self.psi_side] = _rotate(x[self.psi_side], x[ca], x[c] - x[ca], turn)
        return x

    def energy(self, phi: float, psi: float) -> float:
        """:math:`E(\\phi, \\psi)` in kJ/mol: rigid, or minimised under torsion restraints (``relax``) and then unrestrained."""
        self.context.setPositions(self.conformation(phi, psi) * self.unit.nanometer)
        if self.relax:
            for index, (i, j, k, m), theta0 in ((self.restraints[0], self.backbone[:4], phi), (self.restraints[1], self.backbone[1:], psi)):
                self.torsion.setTorsionParameters(index, i, j, k, m, [theta0])
            self.torsion.updateParametersInContext(self.context)
            self.openmm.LocalEnergyMinimizer.minimize(self.context, 1e-3, 2000)
        state = self.context.getState(getEnergy=True, groups={0})
        return state.getPotentialEnergy().value_in_unit(self.unit.kilojoule_per_mole)

    def energies(self, theta: np.ndarray) -> np.ndarray:
        """``[N]`` energies (kJ/mol) at the angle pairs ``theta [N, 2]`` (radians)."""
        return np.array([self.energy(float(a), float(b)) for a, b in theta])


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gflownet-measure"


def _cached_energies(mol: Molecule, key: str, theta: np.ndarray) -> np.ndarray:
    """:meth:`Molecule.energies` at ``theta``, read from (or written to) an ``.npy`` file named for the molecule's ``key`` and the points."""
    digest = hashlib.sha256(key.encode() + np.ascontiguousarray(theta, dtype=np.float64).tobytes()).hexdigest()[:24]
    path = _cache_dir() / f"alanine-{digest}.npy"
    if path.is_file():
        return np.load(path)
    energies = mol.energies(theta)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, energies)
    os.replace(tmp, path)
    return energies


def periodic_cubic(grid: Tensor, theta: Tensor) -> Tensor:
    """Periodic Catmull-Rom interpolation ``[B]`` at ``theta [B, 2]`` of values ``grid [G, G]`` at the nodes :math:`2\\pi(j + 1/2)/G`.

    .. math:: f(x) = \\sum_{a, b = -1}^{2} w_a(f_1) w_b(f_2)\\, g_{i_1 + a, i_2 + b},\\quad w = \\big(\\tfrac{-f^3 + 2f^2 - f}{2}, \\tfrac{3f^3 - 5f^2 + 2}{2},
       \\tfrac{-3f^3 + 4f^2 + f}{2}, \\tfrac{f^3 - f^2}{2}\\big)

    indices modulo G: a C^1 interpolant, exact at the nodes, with error :math:`O(h^3)` (Keys 1981, a = -1/2).
    """
    G = grid.shape[0]
    x = theta.double() / (2 * math.pi / G) - 0.5
    i = torch.floor(x)
    f = x - i
    w = torch.stack([(-(f**3) + 2 * f**2 - f) / 2, (3 * f**3 - 5 * f**2 + 2) / 2, (-3 * f**3 + 4 * f**2 + f) / 2, (f**3 - f**2) / 2], -1)  # [B, 2, 4]
    idx = torch.remainder(i.long()[..., None] + torch.arange(-1, 3), G)  # [B, 2, 4]
    vals = grid.double()[idx[:, 0, :, None], idx[:, 1, None, :]]  # [B, 4, 4]
    return torch.einsum("bi,bj,bij->b", w[:, 0], w[:, 1], vals)


def basin_of(theta: Tensor) -> Tensor:
    """Index ``[B]`` into :data:`BASINS` of angles ``theta [B, 2]`` (radians, any real), -1 for none (never, the basins tile the torus)."""
    deg = torch.remainder(torch.rad2deg(theta.double()) + 180.0, 360.0) - 180.0
    phi, psi = deg[:, 0], deg[:, 1]
    out = torch.full((len(theta),), -1, dtype=torch.long)
    for j, (_, (lo, hi), psis) in enumerate(BASINS):
        inside = (phi >= lo) & (phi < hi) & torch.stack([(psi >= a) & (psi < b) for a, b in psis]).any(0)
        out = torch.where(inside & (out < 0), torch.full_like(out, j), out)
    return out


def target(config) -> TorusTarget:
    """The Boltzmann target of ``config`` (module docstring): interpolated grid for training, exact OpenMM energies for evaluation."""
    structure = _structure(config)
    mol = Molecule(structure, config.forcefield, config.relax)
    key = f"{hashlib.sha256(structure.read_bytes()).hexdigest()}|{config.forcefield}|relax={config.relax}|openmm={mol.openmm.__version__}|v1"
    G, kT = config.grid, KB * config.temperature
    nodes = periodic_grid(2, G)
    E = torch.from_numpy(_cached_energies(mol, key, nodes.cpu().numpy())).to(nodes.device)
    check_log_reward_grid("alanine", -E / kT, nodes)  # NaN or -inf energies
    E_min = float(E.min())
    table = (-(E.clamp(max=E_min + ENERGY_CAP * kT) - E_min) / kT).reshape(G, G)

    def log_reward(theta: Tensor) -> Tensor:
        return periodic_cubic(table, theta)

    def log_reward_exact(theta: Tensor) -> Tensor:
        return -(torch.from_numpy(_cached_energies(mol, key, theta.double().cpu().numpy())).to(theta.device) - E_min) / kT

    corners = torch.remainder(nodes + math.pi / G, 2 * math.pi)  # half a cell off the nodes in both angles
    exact, interpolated = log_reward_exact(corners), log_reward(corners)
    low = exact > -10.0  # within 10 k_B T of the minimum: where the probability is
    best = int(torch.argmax(-E))
    info = (
        ("grid", float(G)),
        ("temperature_K", config.temperature),
        ("E_min_kJ_per_mol", E_min),
        ("phi_min_deg", math.degrees(float(nodes[best, 0])) - (360.0 if nodes[best, 0] > math.pi else 0.0)),
        ("psi_min_deg", math.degrees(float(nodes[best, 1])) - (360.0 if nodes[best, 1] > math.pi else 0.0)),
        ("interpolation_max_abs_log_R_error_within_10kT", float((interpolated - exact)[low].abs().max())),
        ("interpolation_jsd_at_cell_corners", grid_jsd(interpolated, exact)),
    )
    names = tuple(name for name, _, _ in BASINS)
    return TorusTarget(
        f"alanine({config.forcefield}, {config.temperature:g} K{', relaxed' if config.relax else ''})", 2, log_reward, log_reward_exact, names, basin_of, info
    )
