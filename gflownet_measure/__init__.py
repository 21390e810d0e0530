"""GFlowNets on measurable pointed graphs: discrete, continuous and hybrid state spaces (Lahlou et al. 2023).

The names a user needs to write a space, check it against the theory and train a GFlowNet on it, re-exported from
the core's modules (which stay importable: ``gflownet_measure.measures``, ``gflownet_measure.losses``, ...):

- the space: :class:`PointedGraph`, its kernels (:class:`Kernel`, :func:`atoms_measure`), measures (:class:`Box`,
  :class:`Atoms`, :class:`Piece`, :class:`Measure`, :func:`counting`, :func:`dirac`, :func:`charted`,
  :func:`sum_measures`, :class:`SampledMeasure`) and charts (:class:`Chart`, :class:`AffineChart`, ...);
- the theory's checks: :func:`check_graph` and its :class:`Report`;
- policies: densities w.r.t. the kernels (:class:`Policy`, :class:`UniformPolicy`, :class:`MLPPolicy`), their heads
  (:class:`BetaHead`, :class:`VonMisesHead`, ...), a state flow (:class:`StateFlow`);
- training: rollouts (:func:`sample_forward`, :func:`sample_backward`, :func:`log_densities`), the objectives
  (:class:`GFlowNet`, :data:`OBJECTIVES`, :func:`get_objective`, :func:`register`), the optimiser and the
  :class:`Trainer`;
- evaluation: importance weights and log Z bounds (:func:`log_weights`, :func:`log_z_bounds`).

``__version__`` is the installed distribution's version (``pyproject.toml``).
"""

from importlib.metadata import PackageNotFoundError, version

from .boxes import Box
from .charts import AffineChart, ArcChart, Chart, PolarChart, WithoutJacobian
from .checks import CheckResult, Report, check_graph
from .densities import KernelDensity, Policy, UniformPolicy
from .graph import PointedGraph
from .heads import BetaHead, BetaMixtureHead, VonMisesHead, VonMisesMixtureHead
from .kernels import Kernel, atoms_measure
from .measures import Atoms, Measure, Piece, charted, counting, dirac, sum_measures
from .metrics import log_weights, log_z_bounds
from .networks import MLPPolicy, StateFlow
from .objectives import OBJECTIVES, Batch, GFlowNet, Objective, get_objective, objective_names, register
from .rollout import log_densities, sample_backward, sample_forward
from .sampled import SampledMeasure
from .training import Trainer, make_optimizer, seed_everything
from .trajectories import Trajectories

try:
    __version__ = version("gflownet-measure")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    # the space
    "PointedGraph",
    "Kernel",
    "atoms_measure",
    "Box",
    "Atoms",
    "Piece",
    "Measure",
    "counting",
    "dirac",
    "charted",
    "sum_measures",
    "SampledMeasure",
    "Chart",
    "AffineChart",
    "PolarChart",
    "ArcChart",
    "WithoutJacobian",
    # the theory's checks
    "check_graph",
    "Report",
    "CheckResult",
    # policies
    "Policy",
    "KernelDensity",
    "UniformPolicy",
    "MLPPolicy",
    "StateFlow",
    "BetaHead",
    "BetaMixtureHead",
    "VonMisesHead",
    "VonMisesMixtureHead",
    # training
    "Trajectories",
    "sample_forward",
    "sample_backward",
    "log_densities",
    "GFlowNet",
    "Batch",
    "Objective",
    "OBJECTIVES",
    "register",
    "get_objective",
    "objective_names",
    "make_optimizer",
    "seed_everything",
    "Trainer",
    # evaluation
    "log_weights",
    "log_z_bounds",
]
