//! Who may read the admin server's `/metrics` and `/status`: as kube-controller-manager
//! decides for its own, by asking the API server. The bearer token is checked with a
//! TokenReview, then a SubjectAccessReview asks whether that user may `get` the request's
//! path (a non-resource URL; RBAC: `nonResourceURLs: ["/metrics", "/status"]`). Answers are
//! cached for ten seconds per token and path, so a scrape every 15 s costs two small requests
//! and a dashboard refreshing every second costs the same. The probes are not behind it.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// How long an answer is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Beyond this many cached answers the cache starts over (tokens are many only under abuse).
const CACHE_MAX: usize = 4096;
/// Reviews in flight at once: callers beyond this get 503 rather than making the controller
/// flood the API server (a stream of random tokens would otherwise cost a TokenReview each).
const REVIEWS_AT_ONCE: usize = 4;

/// The answer for one token and path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// Authenticated as this user, who may not read the path.
    Forbidden(String),
    /// No token, or one the API server does not accept.
    Unauthenticated,
    /// The API server could not be asked; the request is refused, and not cached.
    Unavailable,
}

impl Decision {
    pub fn status(&self) -> StatusCode {
        match self {
            Decision::Allowed => StatusCode::OK,
            Decision::Forbidden(_) => StatusCode::FORBIDDEN,
            Decision::Unauthenticated => StatusCode::UNAUTHORIZED,
            Decision::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// Delegated authentication and authorization with a short cache.
pub struct Access {
    client: Client,
    /// Tokens are never stored: the cache is keyed by a keyed hash of token and path.
    hasher: RandomState,
    cache: Mutex<HashMap<u64, (Instant, Decision)>>,
    reviews: tokio::sync::Semaphore,
}

impl Access {
    pub fn new(client: Client) -> Access {
        Access {
            client,
            hasher: RandomState::new(),
            cache: Mutex::new(HashMap::new()),
            reviews: tokio::sync::Semaphore::new(REVIEWS_AT_ONCE),
        }
    }

    /// The decision for a request's `Authorization` header value and path.
    pub async fn check(&self, authorization: Option<&header::HeaderValue>, path: &str) -> Decision {
        let Some(token) = authorization
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then_some(token)
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
        else {
            return Decision::Unauthenticated;
        };
        let key = self.hasher.hash_one((token, path));
        let now = Instant::now();
        if let Ok(cache) = self.cache.lock()
            && let Some((at, decision)) = cache.get(&key)
            && now.duration_since(*at) < CACHE_TTL
        {
            return decision.clone();
        }
        let Ok(_permit) = self.reviews.try_acquire() else {
            return Decision::Unavailable;
        };
        let decision = self.ask(token, path).await;
        if decision != Decision::Unavailable
            && let Ok(mut cache) = self.cache.lock()
        {
            if cache.len() >= CACHE_MAX {
                cache.retain(|_, (at, _)| now.duration_since(*at) < CACHE_TTL);
                if cache.len() >= CACHE_MAX {
                    cache.clear();
                }
            }
            cache.insert(key, (now, decision.clone()));
        }
        decision
    }

    async fn ask(&self, token: &str, path: &str) -> Decision {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let status = match reviews.create(&PostParams::default(), &review).await {
            Ok(r) => r.status.unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "TokenReview failed; refusing the admin request");
                return Decision::Unavailable;
            }
        };
        let Some(user) = status.user.filter(|_| status.authenticated == Some(true)) else {
            return Decision::Unauthenticated;
        };
        let name = user.username.clone().unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let sars: Api<SubjectAccessReview> = Api::all(self.client.clone());
        match sars.create(&PostParams::default(), &sar).await {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => Decision::Allowed,
            Ok(_) => Decision::Forbidden(name),
            Err(e) => {
                tracing::warn!(error = %e, "SubjectAccessReview failed; refusing the admin request");
                Decision::Unavailable
            }
        }
    }
}
